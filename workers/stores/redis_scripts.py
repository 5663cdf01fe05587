"""The hot transitions of a node instance as Redis server-side scripts: one round trip each, no
run-wide lock, no ``WATCH`` retry loop.

- :data:`START`: claim the result key's lease and mark the instance running (and its node and run,
  the first time), with their events. The claim and the start land together or not at all.
- :data:`FINISH`: store the result (first wins), mark the instance ended, drop the lease, count
  the node's pending instances down, and when that reaches zero, write a node-done marker into
  the outbox. The node's own completion (collecting outputs, releasing children) then runs in a
  run transaction once per node, not once per instance; the marker lets the sweeper finish it
  if the worker dies in between.

Both scripts refuse to act while an exclusive run transaction holds the run's lock (they return
``busy`` and the caller tries again a moment later), so such a transaction never interleaves
with a script: the lock orders them, and Redis runs scripts one at a time. A shared transaction
(a node's completion, see ``StateStore.transaction``) lets them run: by then nothing a script
writes is a record it reads or writes (the run left ``pending`` at its first start, before any
completion; the children it releases have no instances running yet).

Records are pydantic JSON. The scripts read a record's top-level ``status`` and counter with a
pattern on its first occurrence (nested models carry neither field, and JSON strings escape
quotes, so a user's id cannot fake one) and write back JSON that Python built, so no Lua JSON
encoder ever rewrites a record.
"""

from __future__ import annotations

_LIB = """
local function status_of(doc)
  return string.match(doc, '"status":"(%a+)"')
end
local terminal = {succeeded = true, failed = true, skipped = true, cancelled = true}
local function exclusive(lock)
  local holder = redis.call('get', lock)
  return holder and string.sub(holder, 1, 2) == 'x:'
end
local function with_status(doc, new)
  local s, e = string.find(doc, '"status":"%a+"')
  return string.sub(doc, 1, s - 1) .. '"status":"' .. new .. '"' .. string.sub(doc, e + 1)
end
"""

#: KEYS: claim, result, instances, nodes, run, events, live, run lock
#: ARGV: owner, ttl ms, instance id, running instance JSON, node id, started event JSON,
#:       run.running event JSON, live member, now
#: Returns {outcome, lease ms}: started | stored | leased | ended | cancelling | missing | busy
START = _LIB + """
if exclusive(KEYS[8]) then return {'busy', 0} end
if redis.call('exists', KEYS[2]) == 1 then return {'stored', 0} end
local cur = redis.call('hget', KEYS[3], ARGV[3])
if not cur then return {'missing', 0} end
if terminal[status_of(cur)] then return {'ended', 0} end
local run = redis.call('get', KEYS[5])
if string.find(run, '"cancel_requested":true', 1, true) then return {'cancelling', 0} end
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
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
"""

#: KEYS: instances, nodes, events, live, run lock, result, outbox, claim
#: ARGV: instance id, ended instance JSON, node id, event JSON, result JSON or '', live member,
#:       now, node-done marker, lease owner or ''
#: The caller's lease is dropped whatever the outcome (unless busy): its work is over.
#: Returns the node's pending instances left, or -1 ended already, -2 busy, -3 missing,
#: -4 another result is stored under the key (the caller completes with that one).
FINISH = _LIB + """
if exclusive(KEYS[5]) then return -2 end
if ARGV[9] ~= '' and redis.call('get', KEYS[8]) == ARGV[9] then redis.call('del', KEYS[8]) end
local cur = redis.call('hget', KEYS[1], ARGV[1])
if not cur then return -3 end
if terminal[status_of(cur)] then return -1 end
if ARGV[5] ~= '' and not redis.call('set', KEYS[6], ARGV[5], 'NX') then return -4 end
redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
redis.call('zrem', KEYS[4], ARGV[6])
redis.call('rpush', KEYS[3], ARGV[4])
local node = redis.call('hget', KEYS[2], ARGV[3])
local pending = tonumber(string.match(node, '"pending_instances":(%-?%d+)')) - 1
node = string.gsub(node, '"pending_instances":%-?%d+', '"pending_instances":' .. pending, 1)
redis.call('hset', KEYS[2], ARGV[3], node)
if pending <= 0 then redis.call('hset', KEYS[7], ARGV[8], ARGV[7]) end
return pending
"""

#: KEYS: run lock. ARGV: lock token, JSON list of commands (``_release key owner`` drops a
#: lease if ``owner`` holds it). Applies a run transaction's writes and drops its lock, only if
#: the lock is still the caller's; returns 1, or 0 when the lock was lost (nothing written).
#: Keys are named in ARGV, so this store does not run on Redis Cluster.
COMMIT = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
for _, c in ipairs(cjson.decode(ARGV[2])) do
  if c[1] == '_release' then
    if redis.call('get', c[2]) == c[3] then redis.call('del', c[2]) end
  else
    redis.call(unpack(c))
  end
end
redis.call('del', KEYS[1])
return 1
"""
