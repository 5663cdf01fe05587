-- KEYS: run, spec, nodes, instances, events, run index, expiry, pinned, ended runs, ended counts
-- ARGV: run id, its nodes' instance-set key prefix, idempotency key prefix
-- Deletes an expired run's keys unless it is pinned or not ended (then it only leaves the
-- expiry index); returns 1 when deleted. The idempotency key goes only if it names this run.
redis.call('zrem', KEYS[7], ARGV[1])
local run = redis.call('get', KEYS[1])
if not run or redis.call('sismember', KEYS[8], ARGV[1]) == 1
   or string.find(run, '"finished_at":null', 1, true) then return 0 end
for _, node in ipairs(redis.call('hkeys', KEYS[3])) do redis.call('del', ARGV[2] .. node) end
local idem = cjson.decode(run)['idempotency_key']
if type(idem) == 'string' and redis.call('get', ARGV[3] .. idem) == ARGV[1] then
  redis.call('del', ARGV[3] .. idem)
end
redis.call('del', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[10])
redis.call('zrem', KEYS[6], ARGV[1])
redis.call('zrem', KEYS[9], ARGV[1])
return 1
