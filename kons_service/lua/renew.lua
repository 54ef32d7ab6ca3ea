-- Extend the lease if this token still holds it.  KEYS: lease.  ARGV: token, ttl_ms.
-- Returns 1 if extended, 0 if the lease is gone or another writer's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
