-- Create a learner's metadata unless it exists.  KEYS: meta.  ARGV: config, incarnation, created_at_ms.
-- Returns {1, config} when created, {0, existing config} otherwise.
local existing = redis.call('HGET', KEYS[1], 'config')
if existing then
  return {0, existing}
end
redis.call('HSET', KEYS[1], 'config', ARGV[1], 'incarnation', ARGV[2], 'version', '0',
  'snap_version', '0', 'snap_token', '', 'snap_chunks', '0', 'snap_bytes', '0', 'created_at', ARGV[3],
  'tip', ARGV[2], 'snap_tip', ARGV[2])
return {1, ARGV[1]}
