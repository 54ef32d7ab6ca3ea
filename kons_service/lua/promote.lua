-- Promote a shadow challenger: its state (written as chunks under a token) and its config become the
-- champion's, at a new version one past the head, logged as an entry that restores that state (field o
-- equal to its own version: every replica rebuilds from the snapshot it is), iff the caller holds the
-- champion's writer lease (so no feedback lands meanwhile) and the head is the one the challenger caught up
-- to. The state is also the newest snapshot and a kept base (see lib/versions.lua); the config in force
-- from each version is kept in ``configs`` (version -> config: a rollback past the promotion restores the
-- previous champion's), and the promotion is an event in meta's ``promotions`` (the newest 64 of [version,
-- challenger, time ms, token]). The lease is released.
-- KEYS: meta, snap, log, kept, shadows, lease, configs.  ARGV: lease token, incarnation, version, tip, config,
-- chunks' token, n_chunks, n_bytes, token (this promotion's), keep_count, keep_max_age_ms, allowance,
-- challenger name.
-- Idempotent: a re-sent call finds its token among the events.
-- Returns {1, new version} | {-1} gone or replaced | {-2} lease lost | {-3} the head moved | {-4} chunks
-- incomplete.  Uses chunks_complete and keep_base (lib/versions.lua).
local meta, snap, log, kept, shadows, lease, configs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  KEYS[7]
local h = redis.call('HMGET', meta, 'incarnation', 'version', 'tip', 'promotions', 'config')
if not h[1] or h[1] ~= ARGV[2] then
  return {-1}
end
local events = cjson.decode(h[4] or '[]')
for _, event in ipairs(events) do
  if event[4] == ARGV[9] then
    return {1, string.format('%d', event[1])}
  end
end
if redis.call('GET', lease) ~= ARGV[1] then
  return {-2}
end
if h[2] ~= ARGV[3] or h[3] ~= ARGV[4] then
  return {-3}
end
if not chunks_complete(snap, ARGV[6], ARGV[7], ARGV[8]) then
  return {-4}
end
local v = tonumber(ARGV[3]) + 1
local version = string.format('%d', v)
local tip = ARGV[9] .. '/' .. version
redis.call('XADD', log, version .. '-0', 'o', version, 'h', tip, 'b', h[3])
if redis.call('HLEN', configs) == 0 then
  redis.call('HSET', configs, '0', h[5])
end
redis.call('HSET', configs, version, ARGV[5])
local now = now_ms()
events[#events + 1] = {v, ARGV[13], now, ARGV[9]}
while #events > 64 do
  table.remove(events, 1)
end
redis.call('HSET', meta, 'config', ARGV[5], 'version', version, 'tip', tip, 'snap_version', version,
  'snap_token', ARGV[6], 'snap_chunks', ARGV[7], 'snap_bytes', ARGV[8], 'snap_tip', tip,
  'promotions', cjson.encode(events))
keep_base(meta, snap, log, kept, {v = v, token = ARGV[6], chunks = tonumber(ARGV[7]),
  bytes = tonumber(ARGV[8]), time = now, log = 0, tip = tip},
  {tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])}, shadows)
redis.call('DEL', lease)
return {1, version}
