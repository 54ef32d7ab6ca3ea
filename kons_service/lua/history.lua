-- Record the history of rounds played outside a feedback (a state upload; see record_point in
-- lib/history.lua, prepended by the store).
-- KEYS: meta, hist.  ARGV: incarnation, version, offer (JSON: see lib/history.lua), cap.
-- Returns {1, stride} kept | {0, stride} not needed | {-1, 0} learner gone | {-2, 0} replaced meanwhile.
local h = redis.call('HMGET', KEYS[1], 'incarnation', 'hist_stride', 'hist_version', 'hist_incarnation',
  'hist_totals', 'hist_changes', 'hist_coverage', 'hist_calibration')
if not h[1] then
  return {-1, 0}
end
if h[1] ~= ARGV[1] then
  return {-2, 0}
end
local kept = record_point(KEYS[2], h[1], ARGV[3], tonumber(ARGV[4]), {h[2], h[3], h[4], h[5], h[6], h[7], h[8]})
redis.call('HSET', KEYS[1], unpack(kept[3]))
return {kept[1], kept[2]}
