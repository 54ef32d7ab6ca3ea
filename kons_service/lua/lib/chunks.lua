-- Shared by the scripts that publish a snapshot written as chunks under a token (prepended by the store).
-- keep_chunks(snap, token, n_chunks, n_bytes): false if the chunks ``token:0 .. token:n-1`` do not add up
-- to ``n_bytes`` (a writer died mid-way); else drops every other field of ``snap`` and returns true.
local function keep_chunks(snap, token, n_chunks, n_bytes)
  local prefix = token .. ':'
  local total = 0
  for i = 0, tonumber(n_chunks) - 1 do
    total = total + redis.call('HSTRLEN', snap, prefix .. i)
  end
  if total ~= tonumber(n_bytes) then
    return false
  end
  for _, field in ipairs(redis.call('HKEYS', snap)) do
    if string.sub(field, 1, #prefix) ~= prefix then
      redis.call('HDEL', snap, field)
    end
  end
  return true
end
