-- Shared by history.lua and append.lua (prepended by the store): the learner's history, a capped list of
-- points downsampled as it grows, and the running totals of its rounds' errors.
-- record_point(hist, incarnation, offer, cap, known) -> {kept, stride, fields}: kept is 1 if a point was
-- kept, else 0; ``known`` holds the meta fields hist_stride, hist_version, hist_incarnation, hist_totals,
-- hist_changes, hist_coverage and hist_calibration as HMGET gave them, and ``fields`` are the meta fields to
-- set (name, value, ...): the caller reads and
-- writes them with its own, so that the history costs a feedback no command of its own but the RPUSH of
-- a kept point.
-- ``offer`` (JSON, made by kons_service/history.py) covers the rounds up to ``version``:
--   {"task": ..., "segments": [[version, rounds, abs_error, squared_error, correct, log_loss, extra], ...],
--    "point": "{...}", "change": [version, changes, keep], "targets": keep}  (point: the JSON text of the
--    learner's stats at the last segment's version, with its version; may be absent. change: a change of the
--    data the learner declared at round ``version`` among these rounds, its ``changes``-th; may be absent.
--    extra, may be absent: {"coverage": {target: [rounds, covered, width]}, "bins": [30 numbers]}: the
--    segment's rounds answered with an interval or set, by target coverage (its text, as Python wrote it),
--    how many held the label and the sum of their widths or set sizes; and, of a learner of class
--    probabilities, its rounds in 10 bins of the most probable class's probability: count, sum of that
--    probability and count of rounds whose most probable class was the label, per bin)
-- A change is added to the meta field hist_changes, a JSON list of [version, changes], of which the newest
-- ``keep`` are kept: it is not a point, so the thinning never drops it.
-- Every segment's sums are added to the running totals (meta field hist_totals), so that each kept point
-- carries the totals up to its version and any window between two points has its exact errors. The
-- coverage totals (hist_coverage: a list of [target, since, rounds, covered, width], the most recently
-- answered target last, at most ``targets`` of them: a new target drops the one answered longest ago) and
-- the calibration totals (hist_calibration: [since, the 30 bin sums]) go into the points' totals too,
-- each with ``since``, the version before its first round counted: between two points, a target's window
-- is the difference of its totals if both have it with the same ``since``, its totals at the second if its
-- ``since`` is at or after the first's version (dropped and answered again, or new), else unknown. A
-- segment ends at a multiple of the stride (or at the last round): it becomes a point when its version
-- crosses a multiple of the stride since the last kept one (so points from several writers, in any order,
-- give one series, and one large batch gives a point per window, not one); the stats point at the end,
-- when the call's rounds cross one. When the list exceeds cap,
-- every other point is dropped (the newest is kept, and a point with the learner's stats rather than its
-- neighbour without; the totals are cumulative, so no round's error is lost) and the stride doubles. A new incarnation starts a new series. The caller has checked that the learner
-- exists at ``incarnation``.
local TOTALS = {'rounds', 'abs_error', 'squared_error', 'correct', 'log_loss'}

local BINS = 30

-- Add a segment's sums of rounds answered at ``target`` (since: the version before its first round) to the
-- coverage totals, the target moved last (the most recently answered); beyond ``keep`` targets, the first
-- (answered longest ago) is dropped.
local function add_coverage(coverage, target, since, sums, keep)
  local entry
  for j = 1, #coverage do
    if coverage[j][1] == target then
      entry = table.remove(coverage, j)
      break
    end
  end
  if not entry then
    entry = {target, since, 0, 0, 0}
    while #coverage >= keep do
      table.remove(coverage, 1)
    end
  end
  for k = 1, 3 do
    entry[k + 2] = entry[k + 2] + sums[k]
  end
  coverage[#coverage + 1] = entry
end

-- Running totals are written as JSON by hand, each number to 17 digits (cjson writes 14, and rounding the
-- totals at every append would drift with time): the difference of two points is then the sum of the
-- window's rounds to float64's rounding. %.17g writes an integer as one.
local TOTALS_FORMAT = '"rounds":%.17g,"abs_error":%.17g,"squared_error":%.17g,"correct":%.17g,'
  .. '"log_loss":%.17g'
local LIST5 = '[%.17g,%.17g,%.17g,%.17g,%.17g]'
local BINS_FORMAT = '%.17g' .. string.rep(',%.17g', 9)

-- The coverage totals as stored (hist_coverage) and as a point shows them.
local function coverage_text(coverage, shown)
  local out = {}
  for j, e in ipairs(coverage) do
    if shown then
      out[j] = string.format('{"target":%s,"since":%d,"rounds":%.17g,"covered":%.17g,"width":%.17g}', e[1],
        e[2], e[3], e[4], e[5])
    else
      out[j] = string.format('[%s,%d,%.17g,%.17g,%.17g]', cjson.encode(e[1]), e[2], e[3], e[4], e[5])
    end
  end
  return '[' .. table.concat(out, ',') .. ']'
end

-- The calibration totals as stored (hist_calibration), or as a point shows them.
local function calibration_text(calibration, shown)
  if #calibration == 0 then
    return '[]'
  end
  local count = string.format(BINS_FORMAT, unpack(calibration, 2, 11))
  local confidence = string.format(BINS_FORMAT, unpack(calibration, 12, 21))
  local correct = string.format(BINS_FORMAT, unpack(calibration, 22, 31))
  if shown then
    return string.format('{"since":%d,"count":[%s],"confidence":[%s],"correct":[%s]}', calibration[1], count,
      confidence, correct)
  end
  return string.format('[%d,%s,%s,%s]', calibration[1], count, confidence, correct)
end

-- A point's totals: the errors', the coverage's and the calibration's.
local function totals_text(totals, coverage, calibration)
  local text = string.format(TOTALS_FORMAT, unpack(totals))
  if #coverage > 0 then
    text = text .. ',"coverage":' .. coverage_text(coverage, true)
  end
  if #calibration > 0 then
    text = text .. ',"calibration":' .. calibration_text(calibration, true)
  end
  return '{' .. text .. '}'
end

local function record_point(hist, incarnation, offer, cap, known)
  local stride, last = tonumber(known[1] or '1'), tonumber(known[2] or '-1')
  local totals = {0, 0, 0, 0, 0}
  local changes, coverage, calibration = {}, {}, {}
  if known[3] ~= incarnation then
    redis.call('DEL', hist)
    stride, last = 1, -1
  else  -- (a field an older version did not write stays at its start)
    local function decoded(k, start)
      return known[k] and cjson.decode(known[k]) or start
    end
    totals, changes, coverage, calibration = decoded(4, totals), decoded(5, changes), decoded(6, coverage),
      decoded(7, calibration)
  end
  local extras_changed = known[3] ~= incarnation
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
    local extra = segment[7]
    if extra then
      extras_changed = true
      local since = segment[1] - segment[2]
      if extra['coverage'] then
        for target, sums in pairs(extra['coverage']) do
          add_coverage(coverage, target, since, sums, given['targets'])
        end
      end
      local bins = extra['bins']
      if bins then
        if #calibration == 0 then
          calibration[1] = since
          for k = 1, BINS do
            calibration[k + 1] = 0
          end
        end
        for k = 1, BINS do
          calibration[k + 1] = calibration[k + 1] + bins[k]
        end
      end
    end
    local at = segment[1]
    local newest = i == #segments and given['point'] and math.floor(at / stride0) ~= math.floor(last0 / stride0)
    if at > last and (newest or math.floor(at / stride) ~= math.floor(last / stride)) then
      -- the stats point as Python wrote it (re-encoding would round its numbers to 14 digits), or the version
      local head = string.format('{"version":%d', at)
      if i == #segments and given['point'] then
        head = string.sub(given['point'], 1, -2)
      end
      local point = head .. ',"task":' .. cjson.encode(given['task']) .. ',"totals":'
        .. totals_text(totals, coverage, calibration) .. '}'
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
  -- (cjson writes an empty table as {}: an empty list's text is written by hand)
  local changes_text = #changes > 0 and cjson.encode(changes) or '[]'
  local fields = {'hist_totals', string.format(LIST5, unpack(totals)), 'hist_version', last, 'hist_stride',
    stride, 'hist_incarnation', incarnation, 'hist_changes', changes_text}
  if extras_changed then  -- (else as they were)
    local n = #fields
    fields[n + 1], fields[n + 2] = 'hist_coverage', coverage_text(coverage)
    fields[n + 3], fields[n + 4] = 'hist_calibration', calibration_text(calibration)
  end
  return {kept, stride, fields}
end
