-- KEYS: instances, nodes, events, live, run lock, result, outbox, claim, run, node's instances,
--       ended runs, run's ended counts
-- ARGV: instance id, ended instance JSON, node id, event JSON, result JSON or '', live member,
--       now, outbox member prefix ``run|@``, lease owner or '', then for the node's completion:
--       '1' if the caller allows it here, the node's outputs JSON, node.succeeded event JSON,
--       run.succeeded event JSON, the node's output count (kept if the run counts them), and
--       the node's children's ids.
-- The caller's lease is dropped whatever the outcome (unless busy): its work is over.
-- A run it ends is published on the events key's ``:ended`` channel (``PoolKeys.ended``).
-- Returns {outcome, n, ready children...}, outcome one of steps.Finished's values or busy:
-- counted (n: the node's pending instances left; 0: the caller completes the node), completed
-- (the script completed the node too; n: 1 if that ended the run; its children that became
-- ready follow, each with a ``run|@child`` outbox mark for the caller, or the sweeper, to
-- expand them), other-result (another result is stored under the key: the caller completes
-- with that one), ended, missing, busy (an exclusive run transaction holds the lock).
--
-- The node is completed here only when nothing could disagree: it has this one instance, no
-- run transaction holds the lock (a shared one may be rewriting the run or the children), the
-- run is not cancelling, and, if this ends the run, it has no error. Otherwise the node-done
-- mark goes to the outbox and the caller completes it in a run transaction, as before.
-- Runs after lib.lua (the loader puts it first).
if exclusive(KEYS[5]) then return {'busy', 0} end
if ARGV[9] ~= '' and redis.call('get', KEYS[8]) == ARGV[9] then redis.call('del', KEYS[8]) end
local cur = redis.call('hget', KEYS[1], ARGV[1])
if not cur then return {'missing', 0} end
if terminal[status_of(cur)] then return {'ended', 0} end
if ARGV[5] ~= '' and not redis.call('set', KEYS[6], ARGV[5], 'NX') then
  return {'other-result', 0}
end
redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
redis.call('zrem', KEYS[4], ARGV[6])
redis.call('rpush', KEYS[3], ARGV[4])
local node = redis.call('hget', KEYS[2], ARGV[3])
local pending = tonumber(string.match(node, '"pending_instances":(%-?%d+)')) - 1
node = replace(node, '"pending_instances":%-?%d+', '"pending_instances":' .. pending)
local function defer()
  redis.call('hset', KEYS[2], ARGV[3], node)
  if pending <= 0 then redis.call('hset', KEYS[7], ARGV[8] .. ARGV[3], ARGV[7]) end
  return {'counted', pending}
end
if pending > 0 or ARGV[10] ~= '1' or redis.call('exists', KEYS[5]) == 1
   or redis.call('zcard', KEYS[10]) ~= 1 or not string.find(node, '"outputs":[]', 1, true) then
  return defer()
end
local run = redis.call('get', KEYS[9])
if string.find(run, '"cancel_requested":true', 1, true) then return defer() end
local left = tonumber(string.match(run, '"pending_nodes":(%-?%d+)')) - 1
if left <= 0 and not string.find(run, '"error":null', 1, true) then return defer() end
local children, ready = {}, {}
for i = 15, #ARGV do
  local child = redis.call('hget', KEYS[2], ARGV[i])
  if child and not terminal[status_of(child)] then
    local waiting = tonumber(string.match(child, '"waiting":(%-?%d+)')) - 1
    children[ARGV[i]] = replace(child, '"waiting":%-?%d+', '"waiting":' .. waiting)
    if waiting <= 0 then table.insert(ready, ARGV[i]) end
  end
end
node = replace(with_status(node, 'succeeded'), '"outputs":%[%]', '"outputs":' .. ARGV[11])
redis.call('hset', KEYS[2], ARGV[3], node)
redis.call('rpush', KEYS[3], ARGV[12])
for id, doc in pairs(children) do redis.call('hset', KEYS[2], id, doc) end
for _, id in ipairs(ready) do redis.call('hset', KEYS[7], ARGV[8] .. id, ARGV[7]) end
run = replace(run, '"pending_nodes":%-?%d+', '"pending_nodes":' .. left)
if string.find(run, '"counts_ended":true', 1, true) then
  redis.call('hset', KEYS[12], ARGV[3], ARGV[14])
end
local ended = 0
if left <= 0 then
  run = replace(with_status(run, 'succeeded'), '"finished_at":null', '"finished_at":' .. ARGV[7])
  redis.call('rpush', KEYS[3], ARGV[13])
  redis.call('publish', KEYS[3] .. ':ended', 'ended')
  redis.call('zadd', KEYS[11], ARGV[7], string.sub(ARGV[8], 1, -3))
  ended = 1
elseif status_of(run) == 'pending' then
  run = with_status(run, 'running')
end
redis.call('set', KEYS[9], run)
local out = {'completed', ended}
for _, id in ipairs(ready) do table.insert(out, id) end
return out
