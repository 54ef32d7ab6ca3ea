-- Publish a snapshot whose chunks were written under a fresh token, drop older chunks, trim the log.
-- KEYS: meta, snap, log.  ARGV: incarnation, version, token, n_chunks, n_bytes, tip.
-- The snapshot's round ``version`` must be on the store's history: its id (the head's tip, or the log
-- entry's h) must be ``tip``; a process holding a history the store lost cannot publish it.
-- Returns {1} | {-1} learner gone or replaced | {-2, snap_version} not newer (or not this history)
-- | {-3} chunks incomplete.  Uses keep_chunks (lib/chunks.lua).
local meta, snap, log = KEYS[1], KEYS[2], KEYS[3]
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
  tip = nil
  local id = string.format('%d-0', v)
  for _, entry in ipairs(redis.call('XRANGE', log, id, id)) do
    tip = ''
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'h' then
        tip = fields[i + 1]
      end
    end
  end
end
if tip ~= ARGV[6] then
  return {-2, h[3]}
end
if not keep_chunks(snap, ARGV[3], ARGV[4], ARGV[5]) then
  return {-3}
end
redis.call('HSET', meta, 'snap_version', ARGV[2], 'snap_token', ARGV[3], 'snap_chunks', ARGV[4],
  'snap_bytes', ARGV[5], 'snap_tip', ARGV[6])
redis.call('XTRIM', log, 'MINID', string.format('%d-0', v + 1))
return {1}
