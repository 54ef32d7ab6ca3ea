-- Compare-and-append the feedback rounds of one or more requests to the learner's ordered log; at most once
-- per request id. Uses record_point (lib/history.lua, prepended by the store).
-- KEYS: meta, lease, log, ids, ids_exp, reqs, reqs_exp, hist, reqs_kept.
-- ARGV: token, incarnation, expected_version, expected_tip, leased, record_ttl_ms, max_answers,
--       history_offer ('' for none: see lib/history.lua), history_cap, record_room, n_requests,
--       then for each request: request_id ('' for none), fingerprint (of its body), record, n_rounds,
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
-- Each client request id is remembered in two parts, both in ``reqs``: its marker, rid -> "<version>:<fingerprint>",
-- kept for record_ttl_ms whatever happens (``reqs_exp`` holds its expiry), so a retry is never applied
-- twice; and the record of its answer, '=' .. rid -> record ('=' is not allowed in a request id), kept
-- only while it fits: the oldest answers (``reqs_kept``: their ids, oldest first) are forgotten first
-- when the records' bytes would exceed record_room (the learner's reservation in its tenant's byte budget)
-- or there would be more than max_answers of them. A marker is never dropped to make room: if the markers
-- alone would not fit record_room, nothing is appended. The bytes are counted in ``reqs`` itself ('*marks',
-- '*answers'), so a Redis rollback restores them with the records they count; and a wrong count can only
-- cost answers, never a marker. A client's request id already in ``reqs`` means that request was applied
-- before: nothing is appended and {2, index, "<version>:<fingerprint>", record or ''} is returned (index:
-- 1-based, of the first such request; a marker written before answers were kept apart is
-- "<version>:<record>"). The rounds' errors (and, when due, a point) go into the learner's history in the
-- same call.
-- Returns {1, new_version, stride, record_bytes} (stride 0: no point offered; record_bytes: what the
-- records hold after the call, -1 if it kept none) | {2, index, marker, record} | {-1} gone
-- | {-2} lease lost or held by another writer | {-3, version} moved on | {-4, id} id gone
-- | {-5, bytes} the markers would need more than record_room (nothing is appended).
local meta, lease, log, ids, ids_exp, reqs, reqs_exp, hist, reqs_kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
  KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local token, incarnation, expected, expected_tip = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n_requests = tonumber(ARGV[11])
local first_round = 12 + 4 * n_requests
local n_rounds = (#ARGV - first_round + 1) / 5
local final = tonumber(expected) + n_rounds
local mine = token .. '/' .. string.format('%d', final)

local h = redis.call('HMGET', meta, 'incarnation', 'version', 'tip', 'hist_stride', 'hist_version',
  'hist_incarnation', 'hist_totals', 'hist_changes', 'hist_coverage', 'hist_calibration')
if not h[1] then
  return {-1}
end
if h[1] == incarnation and h[3] == mine then  -- this very call, re-sent after its reply was lost
  return {1, h[2], 0}
end
for r = 0, n_requests - 1 do
  local rid = ARGV[12 + 4 * r]
  if rid ~= '' then
    local done = redis.call('HGET', reqs, rid)
    if done then
      return {2, r + 1, done, redis.call('HGET', reqs, '=' .. rid) or ''}
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

-- What a request's marker and its answer's record take in Redis (the field or list entry, the value, the
-- expiry's member and score), as the tenant's budget counts them.
local function marker_bytes(rid, value_bytes)
  return 2 * #rid + value_bytes + 8
end
local function answer_bytes(rid, record_bytes)
  return 2 * #rid + 1 + record_bytes
end

local ttl, room, max_answers = tonumber(ARGV[6]), tonumber(ARGV[10]), tonumber(ARGV[7])
local client_ids = false  -- the expiry of the request ids remembered now (ms), if any
local marks, answers = 0, 0
for r = 0, n_requests - 1 do
  if ARGV[12 + 4 * r] ~= '' then
    local t = redis.call('TIME')
    client_ids = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
    break
  end
end
local function save_counts()
  marks, answers = math.max(marks, 0), math.max(answers, 0)
  redis.call('HSET', reqs, '*marks', string.format('%d', marks), '*answers', string.format('%d', answers))
  redis.call('PEXPIRE', reqs, ttl)
  redis.call('PEXPIRE', reqs_exp, ttl)
  redis.call('PEXPIRE', reqs_kept, ttl)
end
local function forget_answer(rid)
  local held = redis.call('HSTRLEN', reqs, '=' .. rid)
  if held > 0 then
    redis.call('HDEL', reqs, '=' .. rid)
    answers = answers - answer_bytes(rid, held)
  end
end
if client_ids then
  local counted = redis.call('HMGET', reqs, '*marks', '*answers')
  marks, answers = tonumber(counted[1] or '0'), tonumber(counted[2] or '0')
  if not counted[1] and redis.call('EXISTS', reqs) == 1 then  -- kept before they were counted: count them
    for _, field in ipairs(redis.call('HKEYS', reqs)) do
      local first = string.sub(field, 1, 1)
      if first == '=' then
        answers = answers + answer_bytes(string.sub(field, 2), redis.call('HSTRLEN', reqs, field))
      elseif first ~= '*' then
        marks = marks + marker_bytes(field, redis.call('HSTRLEN', reqs, field))
      end
    end
  end
  -- the expired first (their retries are new requests now): markers and answers
  local now = client_ids - ttl
  local expired = redis.call('ZRANGEBYSCORE', reqs_exp, '-inf', string.format('%d', now), 'LIMIT', 0,
    64 + 2 * n_requests)
  for _, old in ipairs(expired) do
    marks = marks - marker_bytes(old, redis.call('HSTRLEN', reqs, old))
    forget_answer(old)
    redis.call('HDEL', reqs, old)
    redis.call('ZREM', reqs_exp, old)
  end
  for _ = 1, #expired do  -- their ids at the head of reqs_kept
    local head = redis.call('LINDEX', reqs_kept, 0)
    if not head or redis.call('HEXISTS', reqs, '=' .. head) == 1 then
      break
    end
    redis.call('LPOP', reqs_kept)
  end
  local new_marks = 0
  local v = tonumber(expected)
  for r = 0, n_requests - 1 do
    v = v + tonumber(ARGV[15 + 4 * r])
    local rid = ARGV[12 + 4 * r]
    if rid ~= '' then
      new_marks = new_marks + marker_bytes(rid, #string.format('%d', v) + 1 + #ARGV[13 + 4 * r])
    end
  end
  if marks + new_marks > room then
    save_counts()
    return {-5, string.format('%d', marks + new_marks + answers)}
  end
end

local v = tonumber(expected)
local tip = expected_tip
local i = first_round
for r = 0, n_requests - 1 do
  local rid, fingerprint, record = ARGV[12 + 4 * r], ARGV[13 + 4 * r], ARGV[14 + 4 * r]
  local count = tonumber(ARGV[15 + 4 * r])
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
    local marker = string.format('%d', v) .. ':' .. fingerprint
    redis.call('HSET', reqs, rid, marker, '=' .. rid, record)
    redis.call('ZADD', reqs_exp, string.format('%d', client_ids), rid)
    redis.call('RPUSH', reqs_kept, rid)
    marks = marks + marker_bytes(rid, #marker)
    answers = answers + answer_bytes(rid, #record)
  end
end
local version = string.format('%d', v)
local stride = 0
if ARGV[8] ~= '' then
  local kept = record_point(hist, incarnation, ARGV[8], tonumber(ARGV[9]),
    {h[4], h[5], h[6], h[7], h[8], h[9], h[10]})
  stride = kept[2]
  redis.call('HSET', meta, 'version', version, 'tip', tip, unpack(kept[3]))
else
  redis.call('HSET', meta, 'version', version, 'tip', tip)
end
if ARGV[5] == '1' then
  redis.call('DEL', lease)
end
if not client_ids then
  return {1, version, stride, '-1'}
end
-- the oldest answers go first, to fit the room and the count (their markers stay: see above)
while marks + answers > room or redis.call('LLEN', reqs_kept) > max_answers do
  local oldest = redis.call('LPOP', reqs_kept)
  if not oldest then
    break
  end
  forget_answer(oldest)
end
save_counts()
return {1, version, stride, string.format('%d', marks + answers)}
