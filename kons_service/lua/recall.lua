-- Features remembered under ids that have not expired ('' for an unknown or expired id).
-- KEYS: ids, ids_exp.  ARGV: ids.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i, id in ipairs(ARGV) do
  local expires = redis.call('ZSCORE', KEYS[2], id)
  local payload = redis.call('HGET', KEYS[1], id)
  if expires and payload and tonumber(expires) > now then
    out[i] = payload
  else
    out[i] = ''
  end
end
return out
