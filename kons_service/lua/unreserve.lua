-- Drop learners' reservations (their state's, their remembered ids', kept versions' and request ids')
-- from the tenant's total (see reserve.lua).  KEYS: the tenant's bytes hash, then its other budget hashes.
-- ARGV: min_age_ms, then names. A
-- reservation made less than min_age_ms ago is kept: its learner may be being created right now (the
-- reservation comes first). Returns the number of reservations dropped.
local bytes = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local min_age = tonumber(ARGV[1])
local dropped, freed = 0, 0
for _, key in ipairs(KEYS) do
  for i = 2, #ARGV do
    local entry = redis.call('HGET', key, ARGV[i])
    if entry then
      local held, at = string.match(entry, '^(%d+) (%d+)$')
      if now - tonumber(at) >= min_age then
        redis.call('HDEL', key, ARGV[i])
        dropped, freed = dropped + 1, freed + tonumber(held)
      end
    end
  end
end
if freed > 0 then
  local total = tonumber(redis.call('HGET', bytes, '*total') or '0') - freed
  redis.call('HSET', bytes, '*total', string.format('%d', math.max(total, 0)))
end
return dropped
