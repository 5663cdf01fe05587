"""Fair queuing for the Redis pool: tenants take turns in Redis, in front of Dramatiq's queues.

The embedded :class:`~.fair_queue.FairEnqueuer` keeps its waiting messages in memory, which
works because one process sends and runs everything. A Redis pool has many senders (gateways,
clients, every worker that completes a node) and many consumers, so the same idea lives in
Redis, for each queue (on a routed pool, each model's own queue, :mod:`.routing`):

- ``<p>:fair:<queue>:t:<tenant>``: the tenant's waiting messages (a list, FIFO), each one
  instance or a chunk of a large release (:mod:`..runtime.chunks`), named by
  :func:`~..runtime.chunks.chunk_name`;
- ``<p>:fair:<queue>:ring`` and ``<p>:fair:<queue>:ring:batch``: the tenants with something
  waiting in the interactive and the batch lane, each in turn order; the interactive lane goes
  first, the batch lane keeps one slot in :data:`~..runtime.batch_queue.BATCH_TURN` while both
  wait (``<p>:fair:<queue>:turns`` counts the interactive lane's turns since the batch lane's);
- ``<p>:fair:<queue>:flight``: messages sent to the broker and not yet finished (a sorted set,
  scored by a deadline, so a message lost with a dead process frees its slot in time, or at
  once when the sweeper sends it again);
- ``<p>:fair:<queue>:workers``: each live worker process's threads on the queue (scored by a
  heartbeat deadline);
- ``<p>:fair:<queue>:since``: the waiting messages, scored by when each began to wait, and
  ``<p>:fair:<queue>:images``, the images they hold (``<p>:fair:<queue>:count``, each one's):
  a worker deciding whether another copy of a model pays sees how long and how much of its
  work waits here, not only on the Dramatiq queue (which holds no more than the window);
- ``<p>:fair:<queue>:routed``: the models' queues of an instance queue that senders used (the
  sweeper counts their waiting messages as the instance queue's backlog).

The window, how many messages of a queue may be in the broker at once, is the live workers'
threads on it: every thread has work, and a newcomer waits behind at most one message per
thread, not behind everything sent before it. Each model's queue has a window of its own: in
one window shared by an instance queue's models, the messages of a model whose workers were
busy sat on its queue and held every slot, while another model's work waited behind them
with its workers idle. One Lua script adds and takes, so senders and
finishing workers never both fill the same slot. A tenant with nothing waiting goes to the
front of the turn order (as FQ-CoDel favours sparse flows), others rotate round robin.

The scripts build their keys from the prefix (tenants are only known at run time), like
Dramatiq's own Redis broker scripts: this is for a single Redis, not a cluster.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

import dramatiq
import redis
from dramatiq import Message
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import q_name
from dramatiq.middleware import Middleware
from pydantic import TypeAdapter

from ..runtime.batch_queue import BATCH_TURN
from ..runtime.chunks import Chunk, Together, chunk_name, chunked, instances_of
from ..stores.records import InstanceRecord
from ..stores.redis_keys import PoolKeys
from ..stores.redis_text import data, texts

log = logging.getLogger(__name__)

#: Sends one message for a chunk of instances (:mod:`..runtime.chunks`) after a delay; its
#: message id.
Send = Callable[[Chunk, float], str]
#: Sends several messages at once (the :class:`~.broker.Enqueuer` pipelines them).
SendMany = Callable[[Sequence[Chunk], float], object]

#: Take instances for free slots (lock-free for callers: the script runs atomically).
#: ARGV: prefix, queue, now, flight ttl, batch turn, the member whose message finished (or
#: ''), then (tenant, lane, member, payload, images) to add first (lane: ``batch`` or '').
#: Returns the payloads taken, in turn order. The ``since`` and ``images`` keys are
#: :func:`~.routing.held_since_key`'s and :func:`~.routing.held_images_key`'s.
_PUSH_AND_TAKE = """
local p, q, now, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local batch_turn = tonumber(ARGV[5])
local base = p .. ':fair:' .. q
local rings = {[''] = base .. ':ring', batch = base .. ':ring:batch'}
local turns, held, payloads = base .. ':turns', base .. ':held', base .. ':payload'
local flight, workers = base .. ':flight', base .. ':workers'
local since, images, counts = base .. ':since', base .. ':images', base .. ':count'
if ARGV[6] ~= '' then redis.call('ZREM', flight, ARGV[6]) end
for i = 7, #ARGV, 5 do
  local tenant, ring, member = ARGV[i], rings[ARGV[i + 1]], ARGV[i + 2]
  -- Sent again while its slot is taken: the sweeper re-sends only what nobody works on (a
  -- dead worker's, a lost message), so that slot is stale; it must not keep the re-sent
  -- message waiting until it expires. (A lost chunk's slot, whose name differs from the
  -- re-sent instances', is freed by RedisFairQueue.resend.)
  redis.call('ZREM', flight, member)
  if redis.call('SADD', held, member) == 1 then
    redis.call('HSET', payloads, member, ARGV[i + 3])
    redis.call('ZADD', since, now, member)
    redis.call('HSET', counts, member, ARGV[i + 4])
    redis.call('INCRBY', images, ARGV[i + 4])
    if redis.call('RPUSH', base .. ':t:' .. tenant, member) == 1 then
      redis.call('LPUSH', ring, tenant)
    end
  end
end
redis.call('ZREMRANGEBYSCORE', flight, '-inf', now)
redis.call('ZREMRANGEBYSCORE', workers, '-inf', now)
local window = 0
for _, w in ipairs(redis.call('ZRANGE', workers, 0, -1)) do
  window = window + tonumber(string.match(w, ':(%d+)$'))
end
local out, busy = {}, redis.call('ZCARD', flight)
while busy < window do
  local ring = rings['']
  if redis.call('EXISTS', rings.batch) == 1 then
    local n = tonumber(redis.call('GET', turns) or '0')
    if n >= batch_turn - 1 or redis.call('EXISTS', ring) == 0 then
      ring = rings.batch
      redis.call('SET', turns, 0)
    else
      redis.call('SET', turns, n + 1)
    end
  end
  local tenant = redis.call('LPOP', ring)
  if not tenant then break end
  local fifo = base .. ':t:' .. tenant
  local member = redis.call('LPOP', fifo)
  if redis.call('LLEN', fifo) > 0 then redis.call('RPUSH', ring, tenant) end
  if member then
    redis.call('SREM', held, member)
    out[#out + 1] = redis.call('HGET', payloads, member)
    redis.call('HDEL', payloads, member)
    redis.call('ZREM', since, member)
    local n = redis.call('HGET', counts, member)
    if n then
      redis.call('HDEL', counts, member)
      if redis.call('DECRBY', images, n) <= 0 then redis.call('DEL', images) end
    end
    redis.call('ZADD', flight, now + ttl, member)
    busy = busy + 1
  end
end
return out
"""

#: The fields a message needs (the rest of the instance stays in the state store).
_PAYLOAD = {"run_id", "instance_id", "node_id", "seq", "queue", "max_retries", "min_backoff",
            "max_backoff"}


def _payload(chunk: Chunk) -> str:
    return "[" + ",".join(inst.model_dump_json(include=_PAYLOAD) for inst in chunk) + "]"


def _chunk(payload: bytes | str) -> list[InstanceRecord]:
    """The instances a waiting member's payload holds: a JSON list, or one instance's JSON
    object as members were written before chunks (still waiting in Redis after an upgrade)."""
    if payload[:1] in (b"{", "{"):
        return [InstanceRecord.model_validate_json(payload)]
    return _CHUNK.validate_json(payload)


_CHUNK = TypeAdapter(list[InstanceRecord])


def _held(member: str) -> list[tuple[str, str]]:
    """The (run id, instance id) pairs a slot's :func:`~..runtime.chunks.chunk_name` names."""
    run_id, _, ids = member.partition("|")
    return [(run_id, i) for i in ids.split(",")]


class RedisFairQueue:
    """``enqueue(instances, delay)`` through per-tenant lists in Redis; :meth:`finished` frees
    a slot and lets the next tenant's message in. ``flight_ttl``: seconds a slot stays taken
    by a message no live worker's heartbeat keeps (its sender died before it reached
    Dramatiq, or no worker serves its queue); the heartbeats of a queue's workers keep the
    slots of its messages that Dramatiq holds, waiting or running (:class:`RedisFairWorker`).
    ``send_many``: sends the messages taken at once (by default ``send`` each). A slot is a
    message: one instance, or a chunk of a large release (:mod:`..runtime.chunks`). ``clock``: the
    wall-clock seconds every deadline here is scored in; all of a pool's processes share the
    scores, so they keep ``time.time``, and a test passes one it moves by hand. ``queue_of``:
    the Dramatiq queue a chunk's message goes to, where that is a model's own (a routed pool):
    the message then waits its turn in that queue's window. ``in_batch_lane(run_id)``: whether
    a run's messages wait in the batch lane (by default none do). ``together``: which small
    releases go as one message (:func:`~..runtime.chunks.chunked`)."""

    def __init__(self, client: redis.Redis, send: Send, tenant_of: Callable[[str], str], *,
                 prefix: str = "genloop", flight_ttl: float = 10.0,
                 send_many: SendMany | None = None,
                 clock: Callable[[], float] = time.time,
                 queue_of: Callable[[Chunk], str] | None = None,
                 in_batch_lane: Callable[[str], bool] | None = None,
                 together: Together | None = None) -> None:
        self.client, self.send, self.tenant_of = client, send, tenant_of
        self.queue_of = queue_of
        self.in_batch_lane = in_batch_lane or (lambda run_id: False)
        self.together = together
        self.send_many = send_many or (lambda chunks, delay: [send(c, delay) for c in chunks])
        self.prefix, self.flight_ttl, self.clock = prefix, flight_ttl, clock
        self._script = client.register_script(_PUSH_AND_TAKE)
        self._routed: set[tuple[str, str]] = set()  # (queue, model's queue) registered

    def key(self, queue: str, part: str) -> str:
        return f"{self.prefix}:fair:{queue}:{part}"

    def __call__(self, instances: Sequence[InstanceRecord], delay: float = 0.0) -> None:
        if delay > 0:
            # A re-look after a lease's remaining time: it is already someone's turn.
            for inst in instances:
                self.send([inst], delay)
            return
        # queue -> (tenant, lane, member, payload, images)
        by_queue: dict[str, list[str]] = {}
        for chunk in chunked(instances, self.together):
            first = chunk[0]
            queue = self.queue_of(chunk) if self.queue_of is not None else first.queue
            if queue != first.queue and (first.queue, queue) not in self._routed:
                # once a process: where the sweeper's backlog finds the model's waiting work
                self.client.sadd(self.key(first.queue, "routed"), queue)
                self._routed.add((first.queue, queue))
            by_queue.setdefault(queue, []).extend([
                self.tenant_of(first.run_id), "batch" if self.in_batch_lane(first.run_id) else "",
                chunk_name(first.run_id, [inst.instance_id for inst in chunk]), _payload(chunk),
                str(sum(inst.expected_items for inst in chunk))])
        for queue, quints in by_queue.items():
            self._take(queue, quints)

    def resend(self, instances: Sequence[InstanceRecord], delay: float = 0.0) -> None:
        """Send again what the sweeper found nobody working on (its worker died, or its
        message was lost), first freeing the slots of the messages that carried it: those are
        stale, and would hold the window until their deadline. A message is found by its
        instances, since the one that carried an instance may have been a chunk of many (on
        its instance queue's window, or a model's)."""
        lost: dict[str, set[tuple[str, str]]] = {}
        for inst in instances:
            lost.setdefault(inst.queue, set()).add((inst.run_id, inst.instance_id))
        for queue, wanted in lost.items():
            for window in (queue, *self.routed(queue)):
                flight = self.key(window, "flight")
                stale = [m for m in texts(self.client.zrange(flight, 0, -1))
                         if any(held in wanted for held in _held(m))]
                if stale:
                    self.client.zrem(flight, *stale)
        self(instances, delay)

    def routed(self, queue: str) -> list[str]:
        """The models' queues of ``queue`` that senders used."""
        return sorted(texts(self.client.smembers(self.key(queue, "routed"))))

    def finished(self, queue: str, run_id: str, instance_ids: Sequence[str]) -> None:
        """A message of ``queue`` for ``instance_ids`` of ``run_id`` ended (done, failed or
        skipped): let the next one in (one round trip)."""
        self._take(queue, done=chunk_name(run_id, instance_ids))

    def pump(self, queue: str) -> None:
        """Fill free slots (a worker joined, or a lost message's slot expired)."""
        self._take(queue)

    def running(self, queue: str, members: Sequence[str], ttl: float) -> None:
        """Keep the slots of started messages (their :func:`~..runtime.chunks.chunk_name`) for
        ``ttl`` seconds more, in one round trip (``XX``: one already finished is not re-added)."""
        if members:
            deadline = self.clock() + ttl
            self.client.zadd(self.key(queue, "flight"), dict.fromkeys(members, deadline),
                             xx=True)

    def waiting(self, queue: str) -> int:
        """Messages of ``queue`` waiting their turn, its models' queues' included."""
        with self.client.pipeline(transaction=False) as pipe:
            for window in (queue, *self.routed(queue)):
                pipe.scard(self.key(window, "held"))
            return sum(pipe.execute())

    def join(self, worker: str, queue: str, threads: int, ttl: float) -> None:
        """Count ``worker``'s threads on ``queue`` for ``ttl`` seconds (renew to stay)."""
        self.client.zadd(self.key(queue, "workers"), {f"{worker}:{threads}": self.clock() + ttl})

    def leave(self, worker: str, queue: str, threads: int) -> None:
        self.client.zrem(self.key(queue, "workers"), f"{worker}:{threads}")

    def _take(self, queue: str, quints: Sequence[str] = (), done: str = "") -> None:
        taken = self._script(args=[self.prefix, queue, self.clock(), self.flight_ttl,
                                   BATCH_TURN, done, *quints])
        if taken:
            self.send_many([_chunk(p) for p in taken], 0.0)


class RedisFairWorker(Middleware):
    """A worker process's part: counts its threads into each queue's window while it lives,
    keeps the slots of the messages it runs and of those still in its queues, and frees each
    slot when its message ends.

    A message let in waits on its Dramatiq queue, or in a worker's prefetch, until a thread
    is free; on a model whose holders are all busy that can be longer than ``flight_ttl``.
    Its slot must not expire meanwhile, or the window lets in more than it holds and another
    tenant's message waits behind them all; so each beat also keeps the slots of the messages
    the queues' Dramatiq hash still holds (sent and not yet done). Only a message that never
    reached Dramatiq (its sender died after taking the slot) lets its slot expire."""

    def __init__(self, fair: RedisFairQueue, actor_prefix: str, heartbeat: float = 2.0) -> None:
        self.fair, self.actor_prefix, self.heartbeat = fair, actor_prefix, heartbeat
        self.id = uuid.uuid4().hex[:12]
        self._queues: list[str] = []
        #: queue -> the hash Dramatiq's RedisBroker keeps the queue's messages in until they
        #: are acknowledged (none on another broker)
        self._messages: dict[str, str] = {}
        self._threads = 0
        self._running: dict[str, tuple[str, str]] = {}  # message id -> queue, slot member
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        whitelist = worker.consumer_whitelist
        # A model's queue (:mod:`.routing`) has a window of its own, which these threads
        # count in as well.
        self._queues = sorted({q_name(q) for q in broker.get_declared_queues()
                               if whitelist is None or q in whitelist})
        self._threads = worker.worker_threads
        if isinstance(broker, RedisBroker):
            self._messages = {q: PoolKeys.dramatiq_queue(broker.namespace, q) + ".msgs"
                              for q in self._queues}
        # The first beat is the thread's: one that failed here (Redis going away as the worker
        # boots) would leave the worker with no thread to join the window, for good
        threading.Thread(target=self._beat_forever, daemon=True, name="genloop-fair").start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        for queue in self._queues:
            self.fair.leave(self.id, queue, self._threads)

    def before_process_message(self, broker: dramatiq.Broker,
                               message: dramatiq.MessageProxy) -> None:
        if message.actor_name.startswith(self.actor_prefix):
            queue = q_name(message.queue_name)
            # No round trip here: the slot keeps the deadline it was taken with (flight_ttl)
            # until the next heartbeat, at most ``heartbeat`` seconds away, renews it.
            with self._lock:
                self._running[message.message_id] = (queue, chunk_name(*instances_of(message.args)))

    def after_process_message(self, broker: dramatiq.Broker,
                              message: dramatiq.MessageProxy, *, result: object = None,
                              exception: BaseException | None = None) -> None:
        self._release(message)

    def after_skip_message(self, broker: dramatiq.Broker,
                           message: dramatiq.MessageProxy) -> None:
        self._release(message)

    def _release(self, message: dramatiq.MessageProxy) -> None:
        # A retry is re-sent by Retries straight to the broker: it runs outside the window
        # (at most one extra message per failing one) rather than risk a slot never freed.
        if message.actor_name.startswith(self.actor_prefix):
            with self._lock:
                self._running.pop(message.message_id, None)
            run_id, instance_ids = instances_of(message.args)
            try:
                self.fair.finished(q_name(message.queue_name), run_id,
                                   instance_ids)
            except redis.RedisError:  # the slot expires on its own; the sweeper re-sends
                log.exception("releasing the fair-queue slot of %s/%s", run_id, instance_ids)

    def _beat(self) -> None:
        for queue in self._queues:
            self.fair.join(self.id, queue, self._threads, ttl=3 * self.heartbeat)
        by_queue: dict[str, list[str]] = {}
        with self._lock:
            for queue, slot in self._running.values():
                by_queue.setdefault(queue, []).append(slot)
        for queue, key in self._messages.items():
            by_queue.setdefault(queue, []).extend(self._sent(key))
        for queue, slots in by_queue.items():
            self.fair.running(queue, slots, ttl=3 * self.heartbeat)
        for queue in self._queues:
            self.fair.pump(queue)

    def _sent(self, key: str) -> list[str]:
        """The slots of this fair queue's messages in a queue's Dramatiq hash: waiting on the
        queue, prefetched or running on some worker."""
        slots = []
        for raw in self.fair.client.hvals(key):
            message = Message.decode(data(raw))
            if message.actor_name.startswith(self.actor_prefix):
                slots.append(chunk_name(*instances_of(message.args)))
        return slots

    def _beat_forever(self) -> None:
        while True:
            try:
                self._beat()
            except Exception:  # a Redis hiccup must not end the heartbeat for good
                log.exception("fair-queue heartbeat failed")
            if self._stop.wait(self.heartbeat):
                return
