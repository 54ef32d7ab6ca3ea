-- Reserve learner-state bytes against the tenant's budget: the learner's reservation grows to at least
-- nbytes, unless that would take the tenant's total over budget.
-- KEYS: the tenant's bytes hash (learner name -> "<bytes> <reserved at, ms>", and '*total' -> the sum;
-- '*' is not allowed in a learner name).  ARGV: name, nbytes, budget.
-- A reservation never shrinks here (unreserve.lua drops it), so a learner's own concurrent growth and a
-- create of the same name cannot lower it. Returns {1 | 0 refused, the learner's bytes, the tenant's total}.
local bytes = KEYS[1]
local name, want, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local held = 0
local entry = redis.call('HGET', bytes, name)
if entry then
  held = tonumber(string.match(entry, '^(%d+)'))
end
local total = tonumber(redis.call('HGET', bytes, '*total') or '0')
if want <= held then
  return {1, string.format('%d', held), string.format('%d', total)}
end
if total - held + want > budget then
  return {0, string.format('%d', held), string.format('%d', total)}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
total = total - held + want
redis.call('HSET', bytes, name, string.format('%d %d', want, now), '*total', string.format('%d', total))
return {1, string.format('%d', want), string.format('%d', total)}
