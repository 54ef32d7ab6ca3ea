-- Shared by the scripts that publish a state written as chunks under a token (prepended by the store):
-- commit_snapshot.lua, replace_state.lua and rollback.lua. A learner keeps several of its states, its
-- "bases": every version from the oldest base on can be rebuilt (that base, then the log after it).
-- Each base is a member of the sorted set ``kept``, scored by its version:
--   "<version> <token> <n_chunks> <n_bytes> <time ms> <log bytes> <tip>"
-- (token '-' for none: the learner as created, built from its config; log bytes: of the logged rounds
-- between the previous base and this one, as the caller counted them).
-- chunks_complete(snap, token, n_chunks, n_bytes): whether the chunks ``token:0 .. token:n-1`` add up to
-- ``n_bytes`` (a writer may have died mid-way).
-- keep_base(meta, snap, log, kept, base, policy): add the base, then apply the retention policy
-- {count, max_age_ms, allowance}: at most ``count`` bases (a middle one goes first: the one whose
-- neighbours are closest, so the kept ones stay spread over the kept history); the oldest goes while the
-- next one is older than ``max_age_ms`` (every version of that age stays restorable); the oldest goes
-- while what the older bases cost (their bytes and the log after each up to the next) exceeds
-- ``allowance`` (their share of the tenant's byte budget). The newest base always stays. Drops every chunk
-- of no kept base (and any a dead writer left, once older than a live writer takes), sets meta's keep_from
-- to the oldest base's version, trims the log before it, but not past what a shadow challenger has yet
-- to learn (``shadows``, when given: its hash of challengers' cursors; a negative one is a stalled
-- challenger's, which keeps nothing).
-- drop_chunks(snap, base): delete a base's chunks (parse_base gives ``base``).
-- retain(meta, snap, log, kept, policy, shadows): the same policy on the kept bases as they are (no new
-- one: an idle learner's older bases age out too); returns their cost and when (ms) the oldest next ages
-- out (0: only the newest is left). ``policy[4]``, when given: the newest base ("<version> <token>") when
-- the allowance was read; if another is newest now, a publication since kept its bases within an allowance
-- of its own, granted after that one, and none is dropped for its bytes (the stale allowance could only
-- drop what that publication kept). Returns the older bases' cost in bytes.
local function chunks_complete(snap, token, n_chunks, n_bytes)
  local prefix = token .. ':'
  local total = 0
  for i = 0, tonumber(n_chunks) - 1 do
    total = total + redis.call('HSTRLEN', snap, prefix .. i)
  end
  return total == tonumber(n_bytes)
end

-- logged_tip(log, version): the id of the logged round at ``version`` ('' for an entry without one, written
-- before rounds had ids), or nil when the log no longer holds it.
local function logged_tip(log, version)
  local id = string.format('%d-0', version)
  for _, entry in ipairs(redis.call('XRANGE', log, id, id)) do
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'h' then
        return fields[i + 1]
      end
    end
    return ''
  end
  return nil
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A writer writes a state's chunks under a token that starts with the time it began ("<ms>-<hex>"), then
-- publishes them; until then they belong to no base. Chunks of no base are a dead writer's only once
-- they are older than any live writer takes (the snapshot lock lasts 2 minutes; 10 leave room for clocks
-- that disagree): dropping younger ones would make a publication under way fail as incomplete.
local WRITER_GRACE_MS = 600000

local function being_written(token, settled)
  local began = tonumber(string.match(token, '^(%d+)%-'))
  return began ~= nil and began > settled
end

local function drop_chunks(snap, base)
  for c = 0, base.chunks - 1 do
    redis.call('HDEL', snap, base.token .. ':' .. c)
  end
end

local function base_text(b)
  return string.format('%d %s %d %d %d %d %s', b.v, b.token, b.chunks, b.bytes, b.time, b.log, b.tip)
end

local function parse_base(member)
  local v, token, chunks, nbytes, time, logged, tip = string.match(member,
    '^(%d+) (%S+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  return {v = tonumber(v), token = token, chunks = tonumber(chunks), bytes = tonumber(nbytes),
    time = tonumber(time), log = tonumber(logged), tip = tip, member = member}
end

local function retain(meta, snap, log, kept, policy, shadows)
  local bases = {}
  for _, member in ipairs(redis.call('ZRANGE', kept, 0, -1)) do
    bases[#bases + 1] = parse_base(member)
  end
  local function drop(i)
    redis.call('ZREM', kept, bases[i].member)
    drop_chunks(snap, bases[i])
    local following = bases[i + 1]
    if following and i > 1 then  -- the log between its neighbours is now the next one's
      redis.call('ZREM', kept, following.member)
      following.log = following.log + bases[i].log
      following.member = base_text(following)
      redis.call('ZADD', kept, following.v, following.member)
    end
    table.remove(bases, i)
  end
  while #bases > math.max(policy[1], 1) do
    if #bases < 3 or policy[1] < 2 then
      drop(1)
    else
      local best, gap = 2, math.huge
      for i = 2, #bases - 1 do
        if bases[i + 1].v - bases[i - 1].v < gap then
          best, gap = i, bases[i + 1].v - bases[i - 1].v
        end
      end
      drop(best)
    end
  end
  local newest = bases[#bases]
  local granted = (policy[4] or '') == '' or policy[4] == string.format('%d %s', newest.v, newest.token)
  local old = now_ms() - policy[2]
  while #bases > 1 and bases[2].time <= old do
    drop(1)
  end
  local cost = 0
  for i = 1, #bases - 1 do
    cost = cost + bases[i].bytes + bases[i + 1].log
  end
  while granted and #bases > 1 and cost > policy[3] do
    cost = cost - bases[1].bytes - bases[2].log
    drop(1)
  end
  local tokens = {}
  for _, b in ipairs(bases) do
    tokens[b.token] = true
  end
  local settled = now_ms() - WRITER_GRACE_MS  -- (a base dropped above took its chunks with it)
  for _, field in ipairs(redis.call('HKEYS', snap)) do
    local token = string.match(field, '^([^:]*)')
    if not tokens[token] and not being_written(token, settled) then
      redis.call('HDEL', snap, field)
    end
  end
  redis.call('HSET', meta, 'keep_from', string.format('%d', bases[1].v))
  local trim = bases[1].v
  if shadows then
    local cursors = redis.call('HVALS', shadows)
    for _, cursor in ipairs(cursors) do
      if tonumber(cursor) >= 0 then  -- (a stalled challenger's is negative: it holds no log)
        trim = math.min(trim, tonumber(cursor))
      end
    end
  end
  redis.call('XTRIM', log, 'MINID', string.format('%d-0', trim + 1))
  local next_ms = 0
  if #bases > 1 then
    next_ms = bases[2].time + policy[2]
  end
  return cost, next_ms
end

local function keep_base(meta, snap, log, kept, base, policy, shadows)
  base.member = base_text(base)
  redis.call('ZADD', kept, base.v, base.member)
  local cost = retain(meta, snap, log, kept, policy, shadows)
  return cost
end
