-- Replace a learner's whole state by an uploaded blob (already written as chunks under a token):
-- a new incarnation whose history starts at the blob's round count; the old log is dropped.
-- KEYS: meta, snap, log.  ARGV: expected config, new incarnation, version, token, n_chunks, n_bytes.
-- Returns {1} | {-1} learner gone | {-2} config changed | {-3} chunks incomplete.
-- Uses keep_chunks (lib/chunks.lua).
local meta, snap, log = KEYS[1], KEYS[2], KEYS[3]
local config = redis.call('HGET', meta, 'config')
if not config then
  return {-1}
end
if config ~= ARGV[1] then
  return {-2}
end
if not keep_chunks(snap, ARGV[4], ARGV[5], ARGV[6]) then
  return {-3}
end
redis.call('DEL', log)
redis.call('HSET', meta, 'incarnation', ARGV[2], 'version', ARGV[3], 'snap_version', ARGV[3],
  'snap_token', ARGV[4], 'snap_chunks', ARGV[5], 'snap_bytes', ARGV[6], 'tip', ARGV[2], 'snap_tip', ARGV[2])
return {1}
