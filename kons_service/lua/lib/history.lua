-- Shared by history.lua and append.lua (prepended by the store): one point of a learner's history, a capped
-- list downsampled as it grows.
-- record_point(meta, hist, incarnation, version, point, cap, known) -> {1, stride} kept | {0, stride} not
-- needed; ``known`` holds the meta fields hist_stride, hist_version and hist_incarnation as HMGET gave them
-- (read by the caller with its own fields, one command instead of two).
-- A point is kept when its version crosses a multiple of the stride since the last kept one (so points
-- from several writers, in any order, give one series); when the list exceeds cap, every other point is
-- dropped (the newest is kept) and the stride doubles. A new incarnation starts a new series. The caller
-- has checked that the learner exists at ``incarnation``.
local function record_point(meta, hist, incarnation, version, point, cap, known)
  local stride, last = tonumber(known[1] or '1'), tonumber(known[2] or '-1')
  if known[3] ~= incarnation then
    redis.call('DEL', hist)
    stride, last = 1, -1
    redis.call('HSET', meta, 'hist_incarnation', incarnation, 'hist_stride', stride)
  end
  if version <= last or math.floor(version / stride) == math.floor(last / stride) then
    return {0, stride}
  end
  local length = redis.call('RPUSH', hist, point)
  redis.call('HSET', meta, 'hist_version', version)
  if length > cap then
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
end
