-- Compare-and-append the feedback rounds of one or more requests to the learner's ordered log; at most once
-- per request id. Uses record_point (lib/history.lua, prepended by the store).
-- KEYS: meta, lease, log, ids, ids_exp, reqs, reqs_exp, hist.
-- ARGV: token, incarnation, expected_version, expected_tip, leased, record_ttl_ms, max_records,
--       history_offer ('' for none: see lib/history.lua), history_cap, n_requests,
--       then for each request: request_id ('' for none), record, n_rounds,
--       then for each round, in the requests' order: x, y, played, id ('' for none), held ('1' when the
--       learner's growth was held in that round, else '').
-- The rounds get log ids (v+1)-0, (v+2)-0, ... only if the learner is still at (incarnation,
-- expected_version, expected_tip): that check is the fence. The tip is the id of the newest round,
-- '<token>/<version>' (the incarnation before the first): a Redis that lost its last rounds and took others at
-- the same versions has another tip, so a process holding the lost history cannot append to the new one.
-- Each entry records its id (h), its parent's (b), its request's client id (r) and whether the learner's
-- growth was held (g), so that a replay notices when the log it continues is not the history it holds, and
-- holds the growth where the writer did.
-- The writer lease only avoids wasted work: with leased = '1' the caller holds it under ``token`` (checked,
-- then released); with '0' the caller took none (its learner was at the head already) and nobody may hold it.
-- Redis-py re-sends a script whose reply was lost: such a re-send finds its own rounds (its token's id at
-- the version it would reach) and answers as the first run did, so a private id per request is not needed.
-- A client's request id already in ``reqs`` means that request was applied before: nothing is appended and
-- {2, index, "<version>:<record>"} is returned (index: 1-based, of the first such request). Otherwise each
-- client id is remembered with "<its version>:<record>" for record_ttl_ms (at most max_records per learner,
-- the oldest dropped first). The rounds' errors (and, when due, a point) go into the learner's history in the
-- same call.
-- Returns {1, new_version, stride} (stride 0: no point offered) | {2, index, stored} | {-1} gone
-- | {-2} lease lost or held by another writer | {-3, version} moved on | {-4, id} id gone.
local meta, lease, log, ids, ids_exp, reqs, reqs_exp, hist = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7], KEYS[8]
local token, incarnation, expected, expected_tip = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n_requests = tonumber(ARGV[10])
local first_round = 11 + 3 * n_requests
local n_rounds = (#ARGV - first_round + 1) / 5
local final = tonumber(expected) + n_rounds
local mine = token .. '/' .. string.format('%d', final)

local h = redis.call('HMGET', meta, 'incarnation', 'version', 'tip', 'hist_stride', 'hist_version',
  'hist_incarnation', 'hist_totals', 'hist_changes')
if not h[1] then
  return {-1}
end
if h[1] == incarnation and h[3] == mine then  -- this very call, re-sent after its reply was lost
  return {1, h[2], 0}
end
for r = 0, n_requests - 1 do
  local rid = ARGV[11 + 3 * r]
  if rid ~= '' then
    local done = redis.call('HGET', reqs, rid)
    if done then
      return {2, r + 1, done}
    end
  end
end
local holder = redis.call('GET', lease)
if (ARGV[5] == '1' and holder ~= token) or (ARGV[5] ~= '1' and holder) then
  return {-2}
end
if h[1] ~= incarnation or h[2] ~= expected or (h[3] or '') ~= expected_tip then
  if h[1] == incarnation and tonumber(h[2]) > final then  -- re-sent, and others appended after it?
    local id = string.format('%d-0', final)
    for _, entry in ipairs(redis.call('XRANGE', log, id, id)) do
      local fields = entry[2]
      for i = 1, #fields, 2 do
        if fields[i] == 'h' and fields[i + 1] == mine then
          return {1, string.format('%d', final), 0}
        end
      end
    end
  end
  return {-3, h[2]}
end
for i = first_round, #ARGV, 5 do
  local id = ARGV[i + 3]
  if id ~= '' and redis.call('HEXISTS', ids, id) == 0 then
    return {-4, id}
  end
end

local v = tonumber(expected)
local tip = expected_tip
local i = first_round
local client_ids = false
for r = 0, n_requests - 1 do
  local rid, record, count = ARGV[11 + 3 * r], ARGV[12 + 3 * r], tonumber(ARGV[13 + 3 * r])
  for _ = 1, count do
    v = v + 1
    local id = ARGV[i + 3]
    local parent = tip
    tip = token .. '/' .. string.format('%d', v)
    local fields = {'x', ARGV[i], 'y', ARGV[i + 1], 'p', ARGV[i + 2], 'h', tip, 'b', parent}
    if rid ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'r', rid
    end
    if ARGV[i + 4] ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'g', '1'
    end
    redis.call('XADD', log, string.format('%d-0', v), unpack(fields))
    if id ~= '' then
      redis.call('HDEL', ids, id)
      redis.call('ZREM', ids_exp, id)
    end
    i = i + 5
  end
  if rid ~= '' then
    if not client_ids then
      local t = redis.call('TIME')
      client_ids = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[6])
    end
    redis.call('HSET', reqs, rid, string.format('%d', v) .. ':' .. record)
    redis.call('ZADD', reqs_exp, string.format('%d', client_ids), rid)
  end
end
local version = string.format('%d', v)
local stride = 0
if ARGV[8] ~= '' then
  local kept = record_point(hist, incarnation, ARGV[8], tonumber(ARGV[9]), {h[4], h[5], h[6], h[7], h[8]})
  stride = kept[2]
  redis.call('HSET', meta, 'version', version, 'tip', tip, unpack(kept[3]))
else
  redis.call('HSET', meta, 'version', version, 'tip', tip)
end
if ARGV[5] == '1' then
  redis.call('DEL', lease)
end
if client_ids then
  local ttl = tonumber(ARGV[6])
  local now = client_ids - ttl
  local expired = redis.call('ZRANGEBYSCORE', reqs_exp, '-inf', string.format('%d', now), 'LIMIT', 0, 64)
  for _, old in ipairs(expired) do
    redis.call('HDEL', reqs, old)
    redis.call('ZREM', reqs_exp, old)
  end
  local excess = redis.call('ZCARD', reqs_exp) - tonumber(ARGV[7])
  if excess > 0 then
    for _, old in ipairs(redis.call('ZRANGE', reqs_exp, 0, math.min(excess, 64) - 1)) do
      redis.call('HDEL', reqs, old)
      redis.call('ZREM', reqs_exp, old)
    end
  end
  if redis.call('PTTL', reqs) < ttl then
    redis.call('PEXPIRE', reqs, ttl)
    redis.call('PEXPIRE', reqs_exp, ttl)
  end
end
return {1, version, stride}
