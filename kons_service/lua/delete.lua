-- Delete every key of one learner (all share its hash tag).  KEYS: meta first, then the others.
-- Returns 1 if the learner existed.
local existed = redis.call('EXISTS', KEYS[1])
redis.call('UNLINK', unpack(KEYS))
return existed
