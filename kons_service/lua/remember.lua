-- Remember predicted features under client ids until a feedback consumes them or they expire.
-- KEYS: meta, ids, ids_exp.  ARGV: ttl_ms, max_ids, then id, payload pairs.  Returns 0 if the learner is
-- gone. At most max_ids are kept per learner: beyond that the oldest are dropped (a feedback naming one
-- then gets unknown_id, as after its expiry), so predicts with ids cannot grow Redis without bound.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now), 'LIMIT', 0, 256)
for _, id in ipairs(expired) do
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[3], string.format('%d', now + ttl), ARGV[i])
end
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[2])
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, excess - 1)) do
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
  end
end
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return 1
