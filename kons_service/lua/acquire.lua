-- Take the learner's writer lease.  KEYS: meta, lease.  ARGV: token, ttl_ms.
-- Returns {-1} if the learner does not exist, {0, pttl} if another writer holds the lease,
-- {1, incarnation, version, snap_version, tip} once this token holds it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[2])}
end
local h = redis.call('HMGET', KEYS[1], 'incarnation', 'version', 'snap_version', 'tip')
return {1, h[1], h[2], h[3], h[4] or ''}
