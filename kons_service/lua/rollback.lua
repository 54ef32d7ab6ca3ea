-- Roll a learner back to its state after version ``target``: that state (rebuilt by the caller from a kept
-- base and the log, written as chunks under a token) becomes the learner's state at a new version, one
-- past the head, logged as a rollback entry (fields o: the target, h/b: its id and its parent's, like a
-- round's), so that every replica sees a change of the head and rebuilds from it, and the rounds after
-- ``target`` stay in the log. Atomic with the appends: a feedback is logged before it or after it. The
-- state is also the newest snapshot and a kept base (see lib/versions.lua), and the rollback an event in
-- meta's ``rollbacks`` (JSON list of [version, target, time ms, token], the newest ``keep_events``).
-- KEYS: meta, snap, log, kept, shadows, configs.  ARGV: incarnation, target, the id of round ``target`` the
-- state was rebuilt to (its tip), token (this rollback's, fresh), chunks' token, n_chunks, n_bytes,
-- keep_count, keep_max_age_ms, allowance, keep_events, and the config in force at ``target``, which
-- becomes the learner's if it is not (a rollback past a promotion restores the previous config; compared
-- here, since a promotion may change the learner's config while the state is rebuilt).
-- Idempotent: a re-sent call finds its token among the events and answers as the first run did.
-- Returns {1, new version, kept bytes} | {-1} gone or replaced | {-2, keep_from, version} target not kept
-- | {-3} the round at ``target`` is not the one the state was rebuilt to | {-4} chunks incomplete.
-- Uses logged_tip, chunks_complete and keep_base (lib/versions.lua).
local meta, snap, log, kept, configs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]
local incarnation, target, target_tip, token = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local h = redis.call('HMGET', meta, 'incarnation', 'version', 'tip', 'keep_from', 'rollbacks', 'snap_version',
  'config')
if not h[1] or h[1] ~= incarnation then
  return {-1}
end
local events = cjson.decode(h[5] or '[]')
for _, event in ipairs(events) do
  if event[4] == token then
    return {1, string.format('%d', event[1]), 0}
  end
end
local version = tonumber(h[2])
local keep_from = tonumber(h[4] or h[6])
if target < keep_from or target > version then
  return {-2, keep_from, version}
end
local tip = h[3]
if target < version then
  tip = logged_tip(log, target)
  if tip == nil then  -- the base itself (its round is trimmed from the log)
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', kept, target, target)) do
      tip = string.match(member, '(%S+)$')
    end
  end
end
if tip ~= target_tip then
  return {-3}
end
if not chunks_complete(snap, ARGV[5], ARGV[6], ARGV[7]) then
  return {-4}
end
local v = version + 1
local new_tip = token .. '/' .. string.format('%d', v)
redis.call('XADD', log, string.format('%d-0', v), 'o', string.format('%d', target), 'h', new_tip, 'b', h[3])
local now = now_ms()
events[#events + 1] = {v, target, now, token}
while #events > tonumber(ARGV[11]) do
  table.remove(events, 1)
end
redis.call('HSET', meta, 'version', string.format('%d', v), 'tip', new_tip, 'snap_version',
  string.format('%d', v), 'snap_token', ARGV[5], 'snap_chunks', ARGV[6], 'snap_bytes', ARGV[7],
  'snap_tip', new_tip, 'rollbacks', cjson.encode(events))
if ARGV[12] ~= h[7] then
  redis.call('HSET', meta, 'config', ARGV[12])
  redis.call('HSET', configs, string.format('%d', v), ARGV[12])
end
local cost = keep_base(meta, snap, log, kept, {v = v, token = ARGV[5], chunks = tonumber(ARGV[6]),
  bytes = tonumber(ARGV[7]), time = now, log = 0, tip = new_tip},
  {tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])}, KEYS[5])
return {1, string.format('%d', v), cost}
