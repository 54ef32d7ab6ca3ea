-- Compare-and-append feedback rounds to the learner's ordered log, then release the lease; at most once
-- per request id.
-- KEYS: meta, lease, log, ids, ids_exp, reqs, reqs_exp.
-- ARGV: token, incarnation, expected_version, request_id, record, record_ttl_ms, max_records,
--       expected_tip, then for each round: x, y, played, id ('' for none).
-- A request id already in ``reqs`` means this request was applied before (a client retry, or redis-py
-- re-sending this very script after a lost reply): nothing is appended and {2, "<version>:<record>"} is
-- returned, checked before the lease and the fence so that a re-sent script still finds its answer.
-- Otherwise the rounds get log ids (v+1)-0, (v+2)-0, ... only if the lease is still ours and the learner
-- is still at (incarnation, expected_version, expected_tip): that check is the fence, the lease only
-- avoids wasted work. The tip is the id of the newest round, '<token>/<version>' (the incarnation before
-- the first): a Redis that lost its last rounds and took others at the same versions has another tip, so
-- a process holding the lost history cannot append to the new one. Each entry records its id (h) and its
-- parent's (b), so that a replay notices when the log it continues is not the history it holds; the request id is then remembered with "<new version>:<record>" for record_ttl_ms (at most
-- max_records per learner, the oldest dropped first).
-- Returns {1, new_version} | {2, stored} | {-1} gone | {-2} lease lost | {-3, version} moved on
-- | {-4, id} id gone.
local meta, lease, log, ids, ids_exp, reqs, reqs_exp = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7]
local rid = ARGV[4]
local h = redis.call('HMGET', meta, 'incarnation', 'version', 'tip')
if not h[1] then
  return {-1}
end
if rid ~= '' then
  local done = redis.call('HGET', reqs, rid)
  if done then
    return {2, done}
  end
end
if redis.call('GET', lease) ~= ARGV[1] then
  return {-2}
end
if h[1] ~= ARGV[2] or h[2] ~= ARGV[3] or (h[3] or '') ~= ARGV[8] then
  return {-3, h[2]}
end
local first = 9
for i = first, #ARGV, 4 do
  local id = ARGV[i + 3]
  if id ~= '' and redis.call('HEXISTS', ids, id) == 0 then
    return {-4, id}
  end
end
local v = tonumber(h[2])
local tip = ARGV[8]
for i = first, #ARGV, 4 do
  v = v + 1
  local id = ARGV[i + 3]
  local parent = tip
  tip = ARGV[1] .. '/' .. string.format('%d', v)
  if rid ~= '' then
    redis.call('XADD', log, string.format('%d-0', v), 'x', ARGV[i], 'y', ARGV[i + 1], 'p', ARGV[i + 2],
      'h', tip, 'b', parent, 'r', rid)
  else
    redis.call('XADD', log, string.format('%d-0', v), 'x', ARGV[i], 'y', ARGV[i + 1], 'p', ARGV[i + 2],
      'h', tip, 'b', parent)
  end
  if id ~= '' then
    redis.call('HDEL', ids, id)
    redis.call('ZREM', ids_exp, id)
  end
end
local version = string.format('%d', v)
redis.call('HSET', meta, 'version', version, 'tip', tip)
redis.call('DEL', lease)
if rid ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ttl = tonumber(ARGV[6])
  local expired = redis.call('ZRANGEBYSCORE', reqs_exp, '-inf', string.format('%d', now), 'LIMIT', 0, 64)
  for _, old in ipairs(expired) do
    redis.call('HDEL', reqs, old)
    redis.call('ZREM', reqs_exp, old)
  end
  redis.call('HSET', reqs, rid, version .. ':' .. ARGV[5])
  redis.call('ZADD', reqs_exp, string.format('%d', now + ttl), rid)
  local excess = redis.call('ZCARD', reqs_exp) - tonumber(ARGV[7])
  if excess > 0 then
    for _, old in ipairs(redis.call('ZRANGE', reqs_exp, 0, math.min(excess, 64) - 1)) do
      redis.call('HDEL', reqs, old)
      redis.call('ZREM', reqs_exp, old)
    end
  end
  if redis.call('PTTL', reqs) < ttl then
    redis.call('PEXPIRE', reqs, ttl)
    redis.call('PEXPIRE', reqs_exp, ttl)
  end
end
return {1, version}
