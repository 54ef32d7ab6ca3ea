-- Create a learner that starts from a state (a fork of another learner's version), unless the name exists:
-- its first kept state is the blob (already written as chunks under a token), at the blob's round count,
-- with an empty log of its own. Like create.lua, a second call finds the learner and changes nothing.
-- KEYS: meta, snap, log, kept.  ARGV: config, incarnation, version, token, n_chunks, n_bytes, created_at_ms.
-- Returns {1, config} when created | {0, existing config} | {-3} chunks incomplete.
-- Uses chunks_complete and keep_base (lib/versions.lua).
local meta, snap, log, kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local existing = redis.call('HGET', meta, 'config')
if existing then
  return {0, existing}
end
if not chunks_complete(snap, ARGV[4], ARGV[5], ARGV[6]) then
  return {-3}
end
redis.call('DEL', log, kept)
redis.call('HSET', meta, 'config', ARGV[1], 'incarnation', ARGV[2], 'version', ARGV[3], 'snap_version', ARGV[3],
  'snap_token', ARGV[4], 'snap_chunks', ARGV[5], 'snap_bytes', ARGV[6], 'created_at', ARGV[7],
  'tip', ARGV[2], 'snap_tip', ARGV[2])
keep_base(meta, snap, log, kept, {v = tonumber(ARGV[3]), token = ARGV[4], chunks = tonumber(ARGV[5]),
  bytes = tonumber(ARGV[6]), time = now_ms(), log = 0, tip = ARGV[2]}, {1, 0, 0})
return {1, ARGV[1]}
