"""The hot transitions of a node instance as Redis server-side scripts: one round trip each, no
run-wide lock, no ``WATCH`` retry loop.

- :data:`START`: claim the result key's lease and mark the instance running (and its node and run,
  the first time), with their events. The claim and the start land together or not at all.
- :data:`FINISH`: store the result (first wins), mark the instance ended, drop the lease, count
  the node's pending instances down; when that reaches zero on a node of one instance (every
  plain node, the common case), also complete the node: its outputs, its children's waiting
  counters, the run's pending nodes and the run's end, with their events. Children that became
  ready get an outbox mark; expanding them into instances needs the planner, so the caller does
  it in a run transaction (or the sweeper does, from the mark, if the caller dies). A node of
  many instances (a map, shards) gets a node-done mark instead and is completed in a run
  transaction once per node, not once per instance.
- :data:`CREATE`: a new run's records, all at once, unless its idempotency key is taken.

START and FINISH refuse to act while an exclusive run transaction holds the run's lock (they
return ``busy`` and the caller tries again a moment later), so such a transaction never
interleaves with a script: the lock orders them, and Redis runs scripts one at a time. A shared
transaction (a node's completion, see ``StateStore.transaction``) lets them start and end
instances: by then nothing those parts write is a record it reads or writes (the run left
``pending`` at its first start, before any completion; the children it releases have no
instances running yet). FINISH completes a node itself only while no transaction at all holds
the lock, since that writes the run and the children as a shared transaction does.

Records are pydantic JSON. The scripts read a record's top-level ``status`` and counter with a
pattern on its first occurrence (nested models carry neither field, and JSON strings escape
quotes, so a user's id cannot fake one) and write back JSON that Python built, so no Lua JSON
encoder ever rewrites a record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import EventRecord, InstanceRecord, ResultRecord


@dataclass(frozen=True)
class ScriptedCompletion:
    """What :data:`FINISH` needs to complete a node of one instance that succeeded: the node's
    outputs (``list[ItemRef]`` as JSON) and their count (for the run's ended counts), the
    events it would append, and the node's children."""

    outputs_json: str
    output_count: int
    node_event: EventRecord
    run_event: EventRecord
    children: list[str]


@dataclass(frozen=True)
class FinishOutcome:
    """:data:`FINISH`'s answer: ``code`` as documented there; when the script completed the
    node (-5), whether that ended the run and which children became ready."""

    code: int
    run_ended: bool = False
    ready: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Start:
    """One :data:`START`: claim ``key`` for ``owner`` (``ttl`` seconds) and store ``running``,
    with its event and the run's, should this be the run's first start."""

    running: InstanceRecord
    key: str
    owner: str
    ttl: float
    started: EventRecord
    run_running: EventRecord


@dataclass(frozen=True)
class Finish:
    """One :data:`FINISH`: store ``result`` (``None``: already stored) and ``done`` with its
    ``event``, drop the ``(key, owner)`` lease; with ``completion``, complete a node of one
    instance."""

    done: InstanceRecord
    event: EventRecord
    result: ResultRecord | None
    lease: tuple[str, str] | None
    completion: ScriptedCompletion | None = None

_LIB = """
local function status_of(doc)
  return string.match(doc, '"status":"(%a+)"')
end
local terminal = {succeeded = true, failed = true, skipped = true, cancelled = true}
local function exclusive(lock)
  local holder = redis.call('get', lock)
  return holder and string.sub(holder, 1, 2) == 'x:'
end
-- Replace the first match of ``pattern`` by the literal ``new`` (gsub would read ``%`` in it).
local function replace(doc, pattern, new)
  local s, e = string.find(doc, pattern)
  return string.sub(doc, 1, s - 1) .. new .. string.sub(doc, e + 1)
end
local function with_status(doc, new)
  return replace(doc, '"status":"%a+"', '"status":"' .. new .. '"')
end
"""

#: KEYS: claim, result, instances, nodes, run, events, live, run lock, results kept until
#: ARGV: owner, ttl ms, instance id, running instance JSON, node id, started event JSON,
#:       run.running event JSON, live member, now, kept-until for a reused result, result key
#: Returns {outcome, lease ms}: started | stored | leased | ended | cancelling | missing | busy.
#: ``leased`` also touches the instance: its delivery will look again (see ``Executor``).
#: ``stored`` keeps the reused result at least until the given time (the retention pass).
START = _LIB + """
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
"""

_APPLY = """
local function apply(commands)
  for _, c in ipairs(cjson.decode(commands)) do
    if c[1] == '_release' then
      if redis.call('get', c[2]) == c[3] then redis.call('del', c[2]) end
    else
      redis.call(unpack(c))
    end
  end
end
"""

#: KEYS: instances, nodes, events, live, run lock, result, outbox, claim, run, node's instances,
#:       ended runs, run's ended counts
#: ARGV: instance id, ended instance JSON, node id, event JSON, result JSON or '', live member,
#:       now, outbox member prefix ``run|@``, lease owner or '', then for the node's completion:
#:       '1' if the caller allows it here, the node's outputs JSON, node.succeeded event JSON,
#:       run.succeeded event JSON, the node's output count (kept if the run counts them), and
#:       the node's children's ids.
#: The caller's lease is dropped whatever the outcome (unless busy): its work is over.
#: A run it ends is published on the events key's ``:ended`` channel (``PoolKeys.ended``).
#: Returns {code, run ended (0/1), ready children...}. code: the node's pending instances left
#: (0: the caller completes the node), -1 ended already, -2 busy, -3 missing, -4 another result
#: is stored under the key (the caller completes with that one), -5 the script completed the
#: node too; its children that became ready follow, each with a ``run|@child`` outbox mark for
#: the caller (or the sweeper) to expand them.
#:
#: The node is completed here only when nothing could disagree: it has this one instance, no
#: run transaction holds the lock (a shared one may be rewriting the run or the children), the
#: run is not cancelling, and, if this ends the run, it has no error. Otherwise the node-done
#: mark goes to the outbox and the caller completes it in a run transaction, as before.
FINISH = _LIB + """
if exclusive(KEYS[5]) then return {-2} end
if ARGV[9] ~= '' and redis.call('get', KEYS[8]) == ARGV[9] then redis.call('del', KEYS[8]) end
local cur = redis.call('hget', KEYS[1], ARGV[1])
if not cur then return {-3} end
if terminal[status_of(cur)] then return {-1} end
if ARGV[5] ~= '' and not redis.call('set', KEYS[6], ARGV[5], 'NX') then return {-4} end
redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
redis.call('zrem', KEYS[4], ARGV[6])
redis.call('rpush', KEYS[3], ARGV[4])
local node = redis.call('hget', KEYS[2], ARGV[3])
local pending = tonumber(string.match(node, '"pending_instances":(%-?%d+)')) - 1
node = replace(node, '"pending_instances":%-?%d+', '"pending_instances":' .. pending)
local function defer()
  redis.call('hset', KEYS[2], ARGV[3], node)
  if pending <= 0 then redis.call('hset', KEYS[7], ARGV[8] .. ARGV[3], ARGV[7]) end
  return {pending}
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
local out = {-5, ended}
for _, id in ipairs(ready) do table.insert(out, id) end
return out
"""

#: KEYS: run lock. ARGV: lock token, JSON list of commands (``_release key owner`` drops a
#: lease if ``owner`` holds it). Applies a run transaction's writes and drops its lock, only if
#: the lock is still the caller's; returns 1, or 0 when the lock was lost (nothing written).
#: Keys are named in ARGV, so this store does not run on Redis Cluster.
COMMIT = _APPLY + """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
apply(ARGV[2])
redis.call('del', KEYS[1])
return 1
"""

#: KEYS: the idempotency key's key, or none. ARGV: run id, JSON list of commands (as COMMIT's).
#: Writes a new run unless the idempotency key names a run already; returns the id of the run
#: that holds the key (this one when it was written).
CREATE = _APPLY + """
if KEYS[1] then
  local existing = redis.call('get', KEYS[1])
  if existing then return existing end
  redis.call('set', KEYS[1], ARGV[1])
end
apply(ARGV[2])
return ARGV[1]
"""

#: KEYS: run, spec, nodes, instances, events, run index, expiry, pinned, ended runs, ended counts
#: ARGV: run id, its nodes' instance-set key prefix, idempotency key prefix
#: Deletes an expired run's keys unless it is pinned or not ended (then it only leaves the
#: expiry index); returns 1 when deleted. The idempotency key goes only if it names this run.
EXPIRE_RUN = """
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
"""

#: KEYS: results kept until. ARGV: now, result key prefix, result keys...
#: Deletes each result still due (not reused since it was listed); returns how many went.
DELETE_RESULTS = """
local gone = 0
for i = 3, #ARGV do
  local at = redis.call('zscore', KEYS[1], ARGV[i])
  if at and tonumber(at) <= tonumber(ARGV[1]) then
    redis.call('zrem', KEYS[1], ARGV[i])
    gone = gone + redis.call('del', ARGV[2] .. ARGV[i])
  end
end
return gone
"""
