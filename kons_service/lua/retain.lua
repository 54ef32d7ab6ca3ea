-- Apply the retention policy to a learner's kept bases without adding one, so that an idle learner's older
-- states age out too (``lib/versions.lua``; the periodic sweep of :mod:`kons_service.core.versions`).
-- KEYS: meta, snap, log, kept, shadows.  ARGV: the policy (keep_count, keep_max_age_ms, allowance bytes, the
-- newest base when the allowance was read: "<version> <token>").
-- Returns {-1} no such learner | {0} no bases (a learner kept before bases were) | {1, the older bases'
-- cost in bytes, when (ms) the oldest next ages out, 0 when only the newest is left}.  Uses retain.
local meta, snap, log, kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', meta) == 0 then
  return {-1}
end
if redis.call('ZCARD', kept) == 0 then
  return {0}
end
local cost, next_ms = retain(meta, snap, log, kept,
  {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]}, KEYS[5])
return {1, cost, next_ms}
