-- Compare-and-append feedback rounds to the learner's ordered log, then release the lease.
-- KEYS: meta, lease, log, ids, ids_exp.
-- ARGV: token, incarnation, expected_version, then for each round: x, y, played, id ('' for none).
-- The rounds get log ids (v+1)-0, (v+2)-0, ... only if the lease is still ours and the learner is still
-- at (incarnation, expected_version): the version check is the fence, the lease only avoids wasted work.
-- Returns {1, new_version} | {-1} gone | {-2} lease lost | {-3, version} moved on | {-4, id} id gone.
local meta, lease, log, ids, ids_exp = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local h = redis.call('HMGET', meta, 'incarnation', 'version')
if not h[1] then
  return {-1}
end
if redis.call('GET', lease) ~= ARGV[1] then
  return {-2}
end
if h[1] ~= ARGV[2] or h[2] ~= ARGV[3] then
  return {-3, h[2]}
end
for i = 4, #ARGV, 4 do
  local id = ARGV[i + 3]
  if id ~= '' and redis.call('HEXISTS', ids, id) == 0 then
    return {-4, id}
  end
end
local v = tonumber(h[2])
for i = 4, #ARGV, 4 do
  v = v + 1
  redis.call('XADD', log, string.format('%d-0', v), 'x', ARGV[i], 'y', ARGV[i + 1], 'p', ARGV[i + 2])
  local id = ARGV[i + 3]
  if id ~= '' then
    redis.call('HDEL', ids, id)
    redis.call('ZREM', ids_exp, id)
  end
end
local version = string.format('%d', v)
redis.call('HSET', meta, 'version', version)
redis.call('DEL', lease)
return {1, version}
