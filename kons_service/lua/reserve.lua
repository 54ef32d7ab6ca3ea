-- Reserve bytes against the tenant's budget: the reservation grows to at least nbytes, unless that would
-- take the tenant's total over budget. A learner's state reservation lives in the tenant's bytes hash,
-- where a name without one gets one (even of 0 bytes: it is what counts the tenant's learners) unless the
-- tenant already has max_learners; the bytes of its remembered prediction ids are reserved apart (in the
-- ids hash, not counted as a learner), against the same total.
-- KEYS: the tenant's bytes hash (learner name -> "<bytes> <reserved at, ms>", and '*total' -> the sum of
-- both hashes; '*' is not allowed in a learner name), then the hash holding this reservation (the same
-- key, or the tenant's ids hash).  ARGV: name, nbytes, budget, max_learners (0 for an ids reservation).
-- A reservation never shrinks here (unreserve.lua drops it; shrink.lua lowers one the periodic sweep
-- finds larger than what it holds: kept versions that aged out, request ids that expired), so a learner's own concurrent growth and a create of the same name
-- cannot lower it. Returns {1 granted | 0 over the byte budget | -1 over the
-- learner count, the reservation's bytes, the tenant's total, the tenant's learners}.
local bytes, entries = KEYS[1], KEYS[2]
local name, want, budget, max_learners = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = 0
local entry = redis.call('HGET', entries, name)
if entry then
  held = tonumber(string.match(entry, '^(%d+)'))
end
local total = tonumber(redis.call('HGET', bytes, '*total') or '0')
local learners = redis.call('HLEN', bytes) - redis.call('HEXISTS', bytes, '*total')
local function reply(code)
  return {code, string.format('%d', held), string.format('%d', total), learners}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if entry and want <= held then  -- confirmed: stamped again, so that shrink.lua leaves it for a while
  redis.call('HSET', entries, name, string.format('%d %d', held, now))
  return reply(1)
end
if not entry and max_learners > 0 and learners >= max_learners then
  return reply(-1)
end
if total - held + want > budget then
  return reply(0)
end
total = total - held + want
if not entry and max_learners > 0 then
  learners = learners + 1
end
held = want
redis.call('HSET', entries, name, string.format('%d %d', want, now))
redis.call('HSET', bytes, '*total', string.format('%d', total))
return reply(1)
