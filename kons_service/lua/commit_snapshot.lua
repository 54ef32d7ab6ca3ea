-- Publish a snapshot whose chunks were written under a fresh token as the newest of the learner's kept
-- bases, keep the older ones the retention policy keeps, trim the log before the oldest.
-- KEYS: meta, snap, log, kept, shadows.  ARGV: incarnation, version, token, n_chunks, n_bytes, tip, then the policy
-- (keep_count, keep_max_age_ms, allowance bytes) and the bytes of the rounds logged since the previous base.
-- The snapshot's round ``version`` must be on the store's history: its id (the head's tip, or the log
-- entry's h) must be ``tip``; a process holding a history the store lost cannot publish it.
-- Returns {1} | {-1} learner gone or replaced | {-2, snap_version} not newer (or not this history)
-- | {-3} chunks incomplete.  Uses logged_tip, chunks_complete and keep_base (lib/versions.lua).
local meta, snap, log, kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = redis.call('HMGET', meta, 'incarnation', 'version', 'snap_version', 'tip')
if not h[1] or h[1] ~= ARGV[1] then
  return {-1}
end
local v = tonumber(ARGV[2])
if v <= tonumber(h[3]) or v > tonumber(h[2]) then
  return {-2, h[3]}
end
local tip = h[4] or ''
if v < tonumber(h[2]) then
  tip = logged_tip(log, v)
end
if tip ~= ARGV[6] then
  return {-2, h[3]}
end
if not chunks_complete(snap, ARGV[3], ARGV[4], ARGV[5]) then
  return {-3}
end
redis.call('HSET', meta, 'snap_version', ARGV[2], 'snap_token', ARGV[3], 'snap_chunks', ARGV[4],
  'snap_bytes', ARGV[5], 'snap_tip', ARGV[6])
local cost = keep_base(meta, snap, log, kept, {v = v, token = ARGV[3], chunks = tonumber(ARGV[4]),
  bytes = tonumber(ARGV[5]), time = now_ms(), log = tonumber(ARGV[10]), tip = ARGV[6]},
  {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}, KEYS[5])
return {1, cost}
