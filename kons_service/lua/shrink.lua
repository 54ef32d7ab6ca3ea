-- Lower a reservation made by reserve.lua to what its learner still holds, giving the rest back to the
-- tenant's total (the periodic sweep, once a learner's older kept versions aged out or its request ids
-- expired: reserve.lua only grows a reservation). One granted or confirmed less than min_age_ms ago is left
-- as it is: a publication or an append may be using it right now (reserve.lua stamps the time of each
-- grant and confirmation).  KEYS: the tenant's bytes hash, then the hash holding the reservation.
-- ARGV: name, nbytes, min_age_ms.  Returns the reservation's bytes after the call (-1: it has none).
local bytes, entries = KEYS[1], KEYS[2]
local name, want, min_age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local entry = redis.call('HGET', entries, name)
if not entry then
  return -1
end
local held, at = string.match(entry, '^(%d+) (%d+)$')
held, at = tonumber(held), tonumber(at)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if want >= held or now - at < min_age then
  return held
end
redis.call('HSET', entries, name, string.format('%d %d', want, at))
local total = tonumber(redis.call('HGET', bytes, '*total') or '0') - (held - want)
redis.call('HSET', bytes, '*total', string.format('%d', math.max(total, 0)))
return want
