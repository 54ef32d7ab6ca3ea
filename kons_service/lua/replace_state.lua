-- Replace a learner's whole state by an uploaded blob (already written as chunks under a token):
-- a new incarnation whose history starts at the blob's round count; the old log is dropped.
-- The old incarnation's kept versions go with its log (and its rollbacks and promotions with its meta): the
-- blob is the new one's only base.
-- KEYS: meta, snap, log, kept.  ARGV: expected config, new incarnation, version, token, n_chunks, n_bytes.
-- Returns {1} | {-1} learner gone | {-2} config changed | {-3} chunks incomplete.
-- Uses chunks_complete, drop_chunks, parse_base and keep_base (lib/versions.lua).
local meta, snap, log, kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local config = redis.call('HGET', meta, 'config')
if not config then
  return {-1}
end
if config ~= ARGV[1] then
  return {-2}
end
if not chunks_complete(snap, ARGV[4], ARGV[5], ARGV[6]) then
  return {-3}
end
for _, member in ipairs(redis.call('ZRANGE', kept, 0, -1)) do
  drop_chunks(snap, parse_base(member))
end
redis.call('DEL', log, kept)
redis.call('HDEL', meta, 'rollbacks', 'promotions')
redis.call('HSET', meta, 'incarnation', ARGV[2], 'version', ARGV[3], 'snap_version', ARGV[3],
  'snap_token', ARGV[4], 'snap_chunks', ARGV[5], 'snap_bytes', ARGV[6], 'tip', ARGV[2], 'snap_tip', ARGV[2])
keep_base(meta, snap, log, kept, {v = tonumber(ARGV[3]), token = ARGV[4], chunks = tonumber(ARGV[5]),
  bytes = tonumber(ARGV[6]), time = now_ms(), log = 0, tip = ARGV[2]}, {1, 0, 0})
return {1}
