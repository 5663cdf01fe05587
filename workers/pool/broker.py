"""Wiring genloop onto a Dramatiq broker: one actor per queue, and the middleware.

Every actor runs the same :class:`~genloop.workers.runtime.executor.Executor`; queues only route
work (``generate`` to ``gpu`` workers, ``select`` to ``cpu`` ones). A message is
``(run id, instance id)`` with the node's retry policy in its options, so Dramatiq's own Retries
middleware applies it, or ``(run id, [instance id, ...])`` for a chunk of a large release
(:mod:`..runtime.chunks`), whose instances are retried one by one.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard, cast

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import current_millis, dq_name
from dramatiq.middleware import CurrentMessage, Retries

from genloop.sdk.errors import Cancelled, Permanent

from ..artifacts.base import ArtifactStore
from ..metrics.prometheus import metrics
from ..metrics.tap import MeteredStore
from ..middleware.attempts import AttemptOutcomes, retry_transients
from ..middleware.metrics import QueueWait
from ..middleware.sweeper import OutboxSweeper
from ..ops.registry import OpRegistry
from ..runtime.chunks import Chunk, Together, chunked, message_args
from ..runtime.executor import Executor
from ..runtime.scheduler import KEEP_SENT, Scheduler
from ..stores.base import StateStore
from ..stores.records import InstanceRecord
from ..stores.redis_keys import PoolKeys
from .fair_queue import FairEnqueuer, FairRelease

if TYPE_CHECKING:
    from dramatiq.brokers.redis import RedisBroker

    from genloop.sdk.graph import Node

    from .redis_fair_queue import RedisFairQueue

ACTOR_PREFIX = "genloop.execute."
DEFAULT_QUEUES = ("gpu", "cpu")
#: Generation can be long; Dramatiq's default 10-minute time limit would kill big batches.
DEFAULT_TIME_LIMIT_MS = 60 * 60 * 1000


#: Messages per Redis pipeline when many are sent at once (a released map).
PIPELINE_MESSAGES = 500


def is_redis_broker(broker: dramatiq.Broker) -> TypeGuard[RedisBroker]:
    """Whether ``broker`` is Dramatiq's ``RedisBroker`` (or a subclass), asked without importing
    redis: a process that never made one (the embedded runtime) saves the ~0.1 s the import
    takes, which is on the way to its first image."""
    module = sys.modules.get("dramatiq.brokers.redis")
    return module is not None and isinstance(broker, module.RedisBroker)


def actor_name(queue: str) -> str:
    return ACTOR_PREFIX + queue


#: The Dramatiq queue of an instance: ``(queue, run id, node id, params)`` -> queue name.
Route = Callable[[str, str, str, dict], str]


def queue_of(chunk: Chunk, route: Route | None = None) -> str:
    """The Dramatiq queue ``chunk``'s message goes to: the one ``route`` picks, else its own."""
    first = chunk[0]
    if route is None:
        return first.queue
    return route(first.queue, first.run_id, first.node_id, first.params)


def _message(chunk: Chunk, route: Route | None = None, **options: object) -> dramatiq.Message:
    """The message for ``chunk`` (one instance or several of one run and queue; with extra
    message ``options``), as its queue's actor would send it, on the queue ``route`` picks (a
    model's own on a routed pool, :mod:`.routing`). A chunk is never retried as a whole for an
    op's failure (its instances are, one by one), so the first instance's retry policy stands
    for it."""
    first = chunk[0]
    queue = queue_of(chunk, route)
    return dramatiq.Message(
        queue_name=queue, actor_name=actor_name(queue),
        args=message_args(chunk), kwargs={},
        options={
            "max_retries": first.max_retries,
            "min_backoff": int(first.min_backoff * 1000),
            "max_backoff": int(first.max_backoff * 1000),
            **options,
        },
    )


#: The message option that marks a message sent to the front of its queue.
FRONT = "genloop_front"

#: Moves a message just sent to the front of its Dramatiq queue, if it is still there, behind
#: the messages already moved there (each marked :data:`FRONT`): interactive messages keep
#: their order among themselves, or a steady stream of rounds overtook an older one. Redis
#: lists have no priority, and Dramatiq's enqueue appends (its script is not ours to change).
#: KEYS: the queue's list, its messages' hash; ARGV: the message's Redis id.
_TO_FRONT = """
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then return end
local i = 0
while true do
  local id = redis.call('LINDEX', KEYS[1], i)
  if not id then
    redis.call('RPUSH', KEYS[1], ARGV[1])
    return
  end
  local raw = redis.call('HGET', KEYS[2], id)
  local options = raw and cjson.decode(raw).options
  if not (options and options.genloop_front) then
    redis.call('LINSERT', KEYS[1], 'BEFORE', id, ARGV[1])
    return
  end
  i = i + 1
end
"""


class Enqueuer:
    """Sends instances to their queue's actor, several of one run to a message when many are
    released at once (:mod:`..runtime.chunks`).

    It builds the messages itself rather than through the actors, so a process that only
    submits (``Client.connect``) declares no actor: see :func:`submitter`.

    ``interactive(run_id)``: whether a run is in the interactive lane. On a routed pool its
    messages go to the front of their model's queue: that queue holds up to a window of
    messages its holders have not taken yet (they take a batch's worth at a time, see
    :mod:`.routing`), and an agent's round waited behind all of them. ``together``: which
    small releases go as one message (:func:`~..runtime.chunks.chunked`).
    """

    def __init__(self, broker: dramatiq.Broker, route: Route | None = None,
                 interactive: Callable[[str], bool] | None = None,
                 together: Together | None = None) -> None:
        self.broker, self.route, self.interactive = broker, route, interactive
        self.together = together
        self._to_front: Any = None

    def __call__(self, instances: Sequence[InstanceRecord], delay: float = 0.0) -> None:
        if delay:
            for inst in instances:
                self.send(inst, delay)
            return
        self.send_chunks(chunked(instances, self.together))

    def send_chunks(self, chunks: Sequence[Chunk], delay: float = 0.0) -> None:
        """One message per chunk; on Redis, in pipelines of :data:`PIPELINE_MESSAGES`."""
        if is_redis_broker(self.broker) and not delay and len(chunks) > 1:
            for start in range(0, len(chunks), PIPELINE_MESSAGES):
                self._send_pipelined(self.broker, chunks[start:start + PIPELINE_MESSAGES])
            return
        for chunk in chunks:
            self.send_chunk(chunk, delay)

    def queue_of(self, chunk: Chunk) -> str:
        """The Dramatiq queue ``chunk``'s message goes to (a model's own on a routed pool)."""
        return queue_of(chunk, self.route)

    def retry(self, inst: InstanceRecord, retries: int, delay: float) -> None:
        """Send ``inst`` again after ``retries`` failed attempts, as Dramatiq's Retries would."""
        self.send(inst, delay, retries=retries)

    def send(self, inst: InstanceRecord, delay: float = 0.0, **options: object) -> str:
        """Send one instance's message (with extra message ``options``); its message id."""
        return self.send_chunk([inst], delay, **options)

    def send_chunk(self, chunk: Chunk, delay: float = 0.0, **options: object) -> str:
        """Send one message for ``chunk`` (with extra message ``options``); its message id."""
        message = _message(chunk, self.route, **options)
        first = not delay and self._first(chunk, message)
        if first:
            message = message.copy(options={FRONT: True})
        sent = self.broker.enqueue(message, delay=int(delay * 1000) or None)
        if first:
            self._front(cast("RedisBroker", self.broker).client, sent)
        return message.message_id

    def _first(self, chunk: Chunk, message: dramatiq.Message) -> bool:
        """Whether ``message`` goes to the front of its queue: an interactive run's, on a
        model's queue of a routed pool."""
        return (self.interactive is not None and message.queue_name != chunk[0].queue
                and self.interactive(chunk[0].run_id))

    def _front(self, client: Any, message: dramatiq.Message) -> None:
        broker = cast("RedisBroker", self.broker)
        if self._to_front is None:
            self._to_front = broker.client.register_script(_TO_FRONT)
        queue = PoolKeys.dramatiq_queue(broker.namespace, message.queue_name)
        self._to_front(keys=[queue, f"{queue}.msgs"],
                       args=[message.options["redis_message_id"]], client=client)

    def _send_pipelined(self, broker: RedisBroker, chunks: Sequence[Chunk]) -> None:
        """What ``RedisBroker.enqueue`` does for each message (a Redis message id of its own,
        the enqueue hooks, a call of the broker's dispatch script), with the script calls in
        one pipeline: one round trip for the batch, not one per message. A released
        10,000-item map sent its messages one round trip each. This reads two of the broker's
        private helpers (Dramatiq 2.x): the script's arguments must be the ones it builds.
        If the pipeline fails, the outbox keeps the instances and the sweeper re-sends them."""
        dispatch = broker.scripts["dispatch"]
        messages = []
        for chunk in chunks:
            message = _message(chunk, self.route)
            messages.append(message.copy(options={
                "redis_message_id": str(uuid.uuid4()),
                **({FRONT: True} if self._first(chunk, message) else {})}))
        with broker.client.pipeline(transaction=False) as pipe:
            for message in messages:
                broker.emit_before("enqueue", message, None)
                dispatch(keys=[broker.namespace], client=pipe, args=[
                    "enqueue", current_millis(), message.queue_name, broker.broker_id,
                    broker.heartbeat_timeout, broker.dead_message_ttl,
                    broker._should_do_maintenance("enqueue"), broker._max_unpack_size(),
                    message.options["redis_message_id"], message.encode()])
                if message.options.get(FRONT):
                    self._front(pipe, message)
            pipe.execute()
        for message in messages:
            broker.emit_after("enqueue", message, None)

    def backlog(self, queue: str) -> int:
        """Messages on ``queue`` (and its delay queue) that are waiting their turn, not lost:
        the sweeper leaves queued instances alone while there are any.

        On Redis, the messages no worker has fetched yet. On a :class:`StubBroker` (the
        embedded runtime, whose one process sends and runs everything), every message not yet
        acknowledged: besides those in the queue, the ones a worker fetched and holds, in its
        prefetch while its threads are busy, in its delay heap, or as the later instances of a
        chunk it is running. Counting only the queue took those for lost as soon as it drained
        (a 120-draft benchmark re-sent several a run)."""
        names: tuple[str, ...] = (queue, dq_name(queue))
        if is_redis_broker(self.broker):
            from .routing import Router

            # and its models' queues, whoever routed to them (a pool may mix senders)
            client, namespace = self.broker.client, self.broker.namespace
            names += tuple(n for r in Router.queues(client, namespace, queue)
                           for n in (r, dq_name(r)))
            with client.pipeline(transaction=False) as pipe:
                for q in names:
                    pipe.llen(PoolKeys.dramatiq_queue(namespace, q))
                return sum(pipe.execute())
        if isinstance(self.broker, StubBroker):
            queues = self.broker.queues
            return sum(queues[q].unfinished_tasks for q in names if q in queues)
        return 0


@dataclass
class Wiring:
    """The objects a worker process (or the embedded runtime) runs with."""

    broker: dramatiq.Broker
    scheduler: Scheduler
    executor: Executor
    enqueue: Enqueuer
    fair: FairEnqueuer | RedisFairQueue | None = None


def _sending(broker: dramatiq.Broker, store: StateStore, registry: OpRegistry, *,
             queues: Sequence[str], fair_window: int | None, shared_fair: str | None,
             runs_work: bool) -> tuple[Scheduler, Enqueuer, FairEnqueuer | RedisFairQueue | None]:
    """The send side every process shares, submitter or worker: the enqueuer (with model
    routing on a Redis pool), the fair queue it sends through if any, and the scheduler over
    ``store`` with its committed events counted in this process's metrics. ``runs_work``: this
    process has worker threads, which take what it just sent from memory, and frees a lost
    message's fair-queue slot as it re-sends it."""
    def interactive(run_id: str) -> bool:
        return scheduler.topology(run_id).graph.priority != "batch"

    def in_batch_lane(run_id: str) -> bool:
        return not interactive(run_id)

    def together(inst: InstanceRecord) -> bool:
        # An agent's round of generate work lands in one engine as one batch (runtime/chunks);
        # other ops keep a message an instance, so slow ones spread over threads
        node = scheduler.topology(inst.run_id).nodes.get(inst.node_id)
        return node is not None and node.op == "generate" and interactive(inst.run_id)

    enqueue = Enqueuer(broker, _router(broker, registry, lambda: scheduler), interactive,
                       together)

    def tenant_of(run_id: str) -> str:
        # A tenant's lanes are two flows, one in each lane's turn order (the interactive
        # lane's goes first): its loops overtake its own campaign, and other tenants'.
        graph = scheduler.topology(run_id).graph
        if graph.namespace is None:
            return run_id
        return f"{graph.namespace}|{graph.priority or 'interactive'}"

    fair: FairEnqueuer | RedisFairQueue | None = None
    resend = None
    if fair_window is not None:
        fair = FairEnqueuer(enqueue.send_chunk, fair_window, tenant_of,
                            in_batch_lane=in_batch_lane, together=together)
    elif shared_fair is not None:
        if not is_redis_broker(broker):
            raise TypeError("shared_fair needs a RedisBroker (its client holds the queue)")
        from .redis_fair_queue import RedisFairQueue

        fair = shared = RedisFairQueue(broker.client, enqueue.send_chunk, tenant_of,
                                       prefix=shared_fair, send_many=enqueue.send_chunks,
                                       queue_of=enqueue.queue_of, in_batch_lane=in_batch_lane,
                                       together=together)
        resend = shared.resend if runs_work else None

    def backlog(queue: str) -> int:  # waiting their turn is not lost either
        return enqueue.backlog(queue) + (fair.waiting(queue) if fair is not None else 0)

    scheduler = Scheduler(_metered(store, registry, lambda: scheduler), registry,
                          fair or enqueue, queues=queues, backlog=backlog, resend=resend,
                          keep_sent=KEEP_SENT if runs_work else 0)
    return scheduler, enqueue, fair


def submitter(broker: dramatiq.Broker, store: StateStore, registry: OpRegistry, *,
              queues: Sequence[str] = DEFAULT_QUEUES,
              shared_fair: str | None = None) -> Scheduler:
    """A scheduler for a process that plans and enqueues but runs no op (``Client.connect``,
    ``genloop serve --redis``): its messages go to ``broker``, or with ``shared_fair`` (a Redis
    key prefix) through the pool's :class:`~.redis_fair_queue.RedisFairQueue`; no actor,
    executor or middleware is declared, nothing it sends is kept for worker threads (it has
    none), and what it commits (runs submitted, roots queued) is counted in its metrics."""
    scheduler, _, _ = _sending(broker, store, registry, queues=queues, fair_window=None,
                               shared_fair=shared_fair, runs_work=False)
    return scheduler


def _router(broker: dramatiq.Broker, registry: OpRegistry,
            scheduler: Callable[[], Scheduler]) -> Route | None:
    """On a Redis pool (unless ``GENLOOP_ROUTING=off``), each model's generate work on its own
    queue (:mod:`.routing`); elsewhere none."""
    if not is_redis_broker(broker) or "generate" not in registry:
        return None
    from .routing import Router, routing_on

    if not routing_on():
        return None

    def node_of(run_id: str, node_id: str) -> Node | None:
        return scheduler().topology(run_id).nodes.get(node_id)

    return Router(broker.client, broker.namespace, registry["generate"].queue, node_of)


def _current_attempt() -> int:
    """The attempt of the message this worker thread runs (``genloop_attempt``, set when a
    message is retried); only an actor asks, while CurrentMessage holds its message."""
    message = CurrentMessage.get_current_message()
    if message is None:
        raise RuntimeError("the attempt is asked for outside an actor's message")
    return int(message.options.get("genloop_attempt", 1))


def _metered(store: StateStore, registry: OpRegistry,
             scheduler: Callable[[], Scheduler]) -> StateStore:
    """``store`` with its committed events counted in this process's metrics (see
    :mod:`genloop.workers.metrics.prometheus`), each labelled with its node's op and queue."""
    meter = metrics()

    def op_of(run_id: str, node_id: str) -> tuple[str, str]:
        node = scheduler().topology(run_id).nodes.get(node_id)
        if node is None:
            return "unknown", "unknown"
        return node.op, registry.queue_of(node) or "unknown"

    metered = MeteredStore(store, lambda run_id, event: meter.observe(run_id, event, op_of))
    # A StateStore in all but name: it passes every method it does not wrap to ``store``.
    return cast(StateStore, metered)


def wire(
    broker: dramatiq.Broker,
    store: StateStore,
    artifacts: ArtifactStore,
    registry: OpRegistry,
    *,
    queues: Sequence[str] = DEFAULT_QUEUES,
    resources: object = None,
    lease_ttl: float = 30.0,
    time_limit_ms: int = DEFAULT_TIME_LIMIT_MS,
    sweep_every: float = 5.0,
    grace: float | None = None,
    fair_window: int | None = None,
    shared_fair: str | None = None,
) -> Wiring:
    """Declare genloop's actors and middleware on ``broker`` and return the wiring.

    ``grace`` (default: ``lease_ttl``) is how long the sweeper leaves an instance that nobody
    works on before re-sending it. ``fair_window``: put a :class:`~.fair_queue.FairEnqueuer` in
    front of the broker, with at most this many messages per queue in the broker; only for a
    process whose workers run everything it sends (the embedded runtime). ``shared_fair``: the
    Redis key prefix of a :class:`~.redis_fair_queue.RedisFairQueue` that every sender and
    worker of a Redis pool shares (needs a ``RedisBroker``; its window is the live workers'
    threads).
    """
    scheduler, enqueue, fair = _sending(broker, store, registry, queues=queues,
                                        fair_window=fair_window, shared_fair=shared_fair,
                                        runs_work=True)
    if isinstance(fair, FairEnqueuer):
        broker.add_middleware(FairRelease(fair))
    elif fair is not None:
        from .redis_fair_queue import RedisFairWorker

        broker.add_middleware(RedisFairWorker(fair, ACTOR_PREFIX))
    executor = Executor(
        scheduler, artifacts, registry, resources=resources, lease_ttl=lease_ttl,
        attempt_of=_current_attempt,
        requeue=enqueue.retry,
    )
    if not any(isinstance(m, CurrentMessage) for m in broker.middleware):
        broker.add_middleware(CurrentMessage())
    # Dramatiq runs after_* hooks in reverse order: placed before Retries, AttemptOutcomes sees
    # each message after Retries has decided between a retry and a failure.
    broker.add_middleware(AttemptOutcomes(scheduler, ACTOR_PREFIX), before=Retries)
    broker.add_middleware(QueueWait(metrics()))
    broker.add_middleware(OutboxSweeper(
        scheduler, every=sweep_every, grace=lease_ttl if grace is None else grace,
        artifacts=artifacts))
    for queue in queues:
        # Decorator form: dramatiq's overloads take a function or options, not both at once.
        dramatiq.actor(
            actor_name=actor_name(queue), queue_name=queue,
            broker=broker, throws=(Permanent, Cancelled), time_limit=time_limit_ms,
        )(retry_transients(executor))
    return Wiring(broker=broker, scheduler=scheduler, executor=executor, enqueue=enqueue,
                  fair=fair)
