-- Record one point of a learner's history: a capped list, downsampled as it grows.
-- KEYS: meta, hist.  ARGV: incarnation, version, point (JSON), cap.
-- A point is kept when its version crosses a multiple of the stride since the last kept one (so points
-- from several writers, in any order, give one series); when the list exceeds cap, every other point is
-- dropped (the newest is kept) and the stride doubles. A new incarnation starts a new series.
-- Returns {1, stride} kept | {0, stride} not needed | {-1, 0} learner gone | {-2, 0} replaced meanwhile.
local meta, hist = KEYS[1], KEYS[2]
local incarnation = redis.call('HGET', meta, 'incarnation')
if not incarnation then
  return {-1, 0}
end
if incarnation ~= ARGV[1] then
  return {-2, 0}
end
local version, cap = tonumber(ARGV[2]), tonumber(ARGV[4])
local stride = tonumber(redis.call('HGET', meta, 'hist_stride') or '1')
local last = tonumber(redis.call('HGET', meta, 'hist_version') or '-1')
if redis.call('HGET', meta, 'hist_incarnation') ~= incarnation then
  redis.call('DEL', hist)
  stride, last = 1, -1
  redis.call('HSET', meta, 'hist_incarnation', incarnation, 'hist_stride', stride)
end
if version <= last or math.floor(version / stride) == math.floor(last / stride) then
  return {0, stride}
end
redis.call('RPUSH', hist, ARGV[3])
redis.call('HSET', meta, 'hist_version', version)
if redis.call('LLEN', hist) > cap then
  local points = redis.call('LRANGE', hist, 0, -1)
  local kept = {}
  for i = 1, #points, 2 do
    kept[#kept + 1] = points[i]
  end
  if #points % 2 == 0 then
    kept[#kept + 1] = points[#points]
  end
  redis.call('DEL', hist)
  redis.call('RPUSH', hist, unpack(kept))
  stride = stride * 2
  redis.call('HSET', meta, 'hist_stride', stride)
end
return {1, stride}
