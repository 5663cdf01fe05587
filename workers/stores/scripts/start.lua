-- KEYS: claim, result, instances, nodes, run, events, live, run lock, results kept until
-- ARGV: owner, ttl ms, instance id, running instance JSON, node id, started event JSON,
--       run.running event JSON, live member, now, kept-until for a reused result, result key
-- Returns {outcome, lease ms}: started | stored | leased | ended | cancelling | missing | busy.
-- ``leased`` also touches the instance: its delivery will look again (see ``Executor``).
-- ``stored`` keeps the reused result at least until the given time (the retention pass).
-- Runs after lib.lua (the loader puts it first).
if exclusive(KEYS[8]) then return {'busy', 0} end
if redis.call('exists', KEYS[2]) == 1 then
  redis.call('zadd', KEYS[9], 'XX', 'GT', ARGV[10], ARGV[11])
  return {'stored', 0}
end
local cur = redis.call('hget', KEYS[3], ARGV[3])
if not cur then return {'missing', 0} end
if terminal[status_of(cur)] then return {'ended', 0} end
local run = redis.call('get', KEYS[5])
if string.find(run, '"cancel_requested":true', 1, true) then return {'cancelling', 0} end
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('zadd', KEYS[7], 'XX', ARGV[9], ARGV[8])
  return {'leased', redis.call('pttl', KEYS[1])}
end
redis.call('hset', KEYS[3], ARGV[3], ARGV[4])
redis.call('zadd', KEYS[7], ARGV[9], ARGV[8])
redis.call('rpush', KEYS[6], ARGV[6])
local node = redis.call('hget', KEYS[4], ARGV[5])
if status_of(node) ~= 'running' then
  redis.call('hset', KEYS[4], ARGV[5], with_status(node, 'running'))
end
if status_of(run) == 'pending' then
  redis.call('set', KEYS[5], with_status(run, 'running'))
  redis.call('rpush', KEYS[6], ARGV[7])
end
return {'started', 0}
