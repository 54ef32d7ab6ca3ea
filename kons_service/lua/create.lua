-- Create a learner's metadata unless it exists, with its first kept base: the learner as its config builds
-- it (see lib/versions.lua).  KEYS: meta, kept.  ARGV: config, incarnation, created_at_ms, and for a shadow
-- challenger its link to its champion (JSON, meta field ``shadow``; '' for none).
-- Returns {1, config} when created, {0, existing config} otherwise.
local existing = redis.call('HGET', KEYS[1], 'config')
if existing then
  return {0, existing}
end
redis.call('HSET', KEYS[1], 'config', ARGV[1], 'incarnation', ARGV[2], 'version', '0',
  'snap_version', '0', 'snap_token', '', 'snap_chunks', '0', 'snap_bytes', '0', 'created_at', ARGV[3],
  'tip', ARGV[2], 'snap_tip', ARGV[2], 'keep_from', '0')
if (ARGV[4] or '') ~= '' then
  redis.call('HSET', KEYS[1], 'shadow', ARGV[4])
end
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[2], 0, string.format('0 - 0 0 %d 0 %s', ARGV[3], ARGV[2]))
return {1, ARGV[1]}
