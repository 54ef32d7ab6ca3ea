-- Take the learner's writer lease.  KEYS: meta, lease.  ARGV: token, ttl_ms, gone ('' for none).
-- ``gone`` is the token of a holder whose process is known to be gone (it has no connection to Redis):
-- a lease still held by exactly that token is taken over; a lease since taken by anyone else is not.
-- Safe even if that process were alive: its append is fenced (it checks the lease and the head).
-- A lease already held by ``token`` is this very call re-sent by redis-py after its reply was lost (a
-- Redis restart): it is taken again, not reported busy (the writer would wait for its own lease's TTL).
-- Returns {-1} if the learner does not exist, {0, pttl, holder} if another writer holds the lease,
-- {1, incarnation, version, snap_version, tip} once this token holds it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] and holder ~= (ARGV[3] or '') then
  return {0, redis.call('PTTL', KEYS[2]), holder}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
local h = redis.call('HMGET', KEYS[1], 'incarnation', 'version', 'snap_version', 'tip')
return {1, h[1], h[2], h[3], h[4] or ''}
