-- Decide the task of a learner created without one: replace its config iff it is still the undecided one
-- of this incarnation (a compare-and-set: of two replicas racing on the first feedback, the first wins and
-- the other reads its decision). Idempotent: a re-sent call finds the config it set.
-- KEYS: meta.  ARGV: incarnation, undecided config, decided config.
-- Returns the config now stored (the decided one, or another writer's decision), or false if the learner
-- is gone; another incarnation's config is returned unchanged (the caller rebuilds from it).
local config, incarnation = unpack(redis.call('HMGET', KEYS[1], 'config', 'incarnation'))
if not config then
  return false
end
if incarnation == ARGV[1] and config == ARGV[2] then
  redis.call('HSET', KEYS[1], 'config', ARGV[3])
  return ARGV[3]
end
return config
