-- Shared by history.lua and append.lua (prepended by the store): the learner's history, a capped list of
-- points downsampled as it grows, and the running totals of its rounds' errors.
-- record_point(hist, incarnation, offer, cap, known) -> {kept, stride, fields}: kept is 1 if a point was
-- kept, else 0; ``known`` holds the meta fields hist_stride, hist_version, hist_incarnation, hist_totals
-- and hist_changes as HMGET gave them, and ``fields`` are the meta fields to set (name, value, ...): the caller reads and
-- writes them with its own, so that the history costs a feedback no command of its own but the RPUSH of
-- a kept point.
-- ``offer`` (JSON, made by kons_service/history.py) covers the rounds up to ``version``:
--   {"task": ..., "segments": [[version, rounds, abs_error, squared_error, correct, log_loss], ...],
--    "point": "{...}", "change": [version, changes, keep]}  (point: the JSON text of the learner's stats
--    at the last segment's version, with its version; may be absent. change: a change of the data the
--    learner declared at round ``version`` among these rounds, its ``changes``-th; may be absent)
-- A change is added to the meta field hist_changes, a JSON list of [version, changes], of which the newest
-- ``keep`` are kept: it is not a point, so the thinning never drops it.
-- Every segment's sums are added to the running totals (meta field hist_totals), so that each kept point
-- carries the totals up to its version and any window between two points has its exact errors. A
-- segment ends at a multiple of the stride (or at the last round): it becomes a point when its version
-- crosses a multiple of the stride since the last kept one (so points from several writers, in any order,
-- give one series, and one large batch gives a point per window, not one); the stats point at the end,
-- when the call's rounds cross one. When the list exceeds cap,
-- every other point is dropped (the newest is kept, and a point with the learner's stats rather than its
-- neighbour without; the totals are cumulative, so no round's error is lost) and the stride doubles. A new incarnation starts a new series. The caller has checked that the learner
-- exists at ``incarnation``.
local TOTALS = {'rounds', 'abs_error', 'squared_error', 'correct', 'log_loss'}

local function record_point(hist, incarnation, offer, cap, known)
  local stride, last = tonumber(known[1] or '1'), tonumber(known[2] or '-1')
  local totals = {0, 0, 0, 0, 0}
  local changes = {}
  if known[3] ~= incarnation then
    redis.call('DEL', hist)
    stride, last = 1, -1
  else
    if known[4] then
      totals = cjson.decode(known[4])
    end
    if known[5] then
      changes = cjson.decode(known[5])
    end
  end
  local given = cjson.decode(offer)
  local change = given['change']
  if change then
    changes[#changes + 1] = {change[1], change[2]}
    while #changes > change[3] do
      table.remove(changes, 1)
    end
  end
  local segments, kept = given['segments'], 0
  -- the call's rounds as a whole, at the stride they started with, decide on the stats point: a thinning
  -- during the call must not lose the learner's state at its newest version
  local stride0, last0 = stride, last
  for i, segment in ipairs(segments) do
    for k = 1, #TOTALS do
      totals[k] = totals[k] + segment[k + 1]
    end
    local at = segment[1]
    local newest = i == #segments and given['point'] and math.floor(at / stride0) ~= math.floor(last0 / stride0)
    if at > last and (newest or math.floor(at / stride) ~= math.floor(last / stride)) then
      local sums = {}
      for k, name in ipairs(TOTALS) do
        sums[name] = totals[k]
      end
      -- the stats point as Python wrote it (re-encoding would round its numbers to 14 digits), or the version
      local head = string.format('{"version":%d', at)
      if i == #segments and given['point'] then
        head = string.sub(given['point'], 1, -2)
      end
      local point = head .. ',"task":' .. cjson.encode(given['task']) .. ',"totals":' .. cjson.encode(sums) .. '}'
      last, kept = at, 1
      if redis.call('RPUSH', hist, point) > cap then
        local points = redis.call('LRANGE', hist, 0, -1)
        local thinned = {}
        for j = 1, #points, 2 do
          -- of each pair, the first, unless only the second holds the learner's stats (a request's last
          -- point): the sizes' curve would lose every point of requests of an even number of rounds
          local pick = points[j]
          if j < #points and not string.find(pick, '"time"', 1, true)
              and string.find(points[j + 1], '"time"', 1, true) then
            pick = points[j + 1]
          end
          thinned[#thinned + 1] = pick
        end
        if #points % 2 == 0 and thinned[#thinned] ~= points[#points] then
          thinned[#thinned + 1] = points[#points]
        end
        redis.call('DEL', hist)
        redis.call('RPUSH', hist, unpack(thinned))
        stride = stride * 2
      end
    end
  end
  -- (cjson writes an empty table as {}: the list's text is written by hand then)
  local changes_text = #changes > 0 and cjson.encode(changes) or '[]'
  return {kept, stride, {'hist_totals', cjson.encode(totals), 'hist_version', last, 'hist_stride', stride,
    'hist_incarnation', incarnation, 'hist_changes', changes_text}}
end
