-- Take the learner's writer lease.  KEYS: meta, lease.  ARGV: token, ttl_ms, gone ('' for none).
-- ``gone`` is the token of a holder whose process is known to be gone (it has no connection to Redis):
-- a lease still held by exactly that token is taken over; a lease since taken by anyone else is not.
-- Safe even if that process were alive: its append is fenced (it checks the lease and the head).
-- Returns {-1} if the learner does not exist, {0, pttl, holder} if another writer holds the lease,
-- {1, incarnation, version, snap_version, tip} once this token holds it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local gone = ARGV[3] or ''
if gone ~= '' and redis.call('GET', KEYS[2]) == gone then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
elseif not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[2]), redis.call('GET', KEYS[2]) or ''}
end
local h = redis.call('HMGET', KEYS[1], 'incarnation', 'version', 'snap_version', 'tip')
return {1, h[1], h[2], h[3], h[4] or ''}
