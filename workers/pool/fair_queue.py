"""Fair queuing in front of the broker: tenants take turns, so a small run is not stuck behind
another tenant's large one.

Dramatiq queues are FIFO: a 96-image run's 24 shard messages, sent at once, all sit ahead of a
1-image run sent a moment later. :class:`FairEnqueuer` keeps at most ``window`` messages per
queue in the broker; the rest wait here in one FIFO per tenant (the run's result namespace,
else the run), and each time a message of the queue finishes, the next one is taken from the
tenants in turn (round robin; a tenant that had nothing waiting goes to the front). A new
tenant's message therefore waits behind at most ``window`` messages, not behind everything
sent before it.

Lanes (docs/batching.md) are two turn orders: a message of the interactive lane is
taken before any of the batch lane's, which keeps one slot in
:data:`~..runtime.batch_queue.BATCH_TURN` while both wait. In one turn order, where a run without a
namespace is a tenant of its own, each message of an agent's loop after its first waited a
turn behind every run of a 100-run campaign.

It needs to see every message it sent finish, so it is for a process whose workers run the
messages it sends (the embedded runtime, ``genloop serve --local``). A message held here is
``queued`` in the store; if the process dies, the sweeper re-sends it once it is stale, as it
would a message lost with a broker's memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Sequence

import dramatiq
from dramatiq.common import q_name
from dramatiq.middleware import Middleware

from ..runtime.batch_queue import BATCH_TURN
from ..runtime.chunks import Chunk, Together, chunk_name, chunked
from ..stores.records import InstanceRecord

#: Sends one message for a chunk of instances (:mod:`..runtime.chunks`) after a delay; its
#: message id.
Send = Callable[[Chunk, float], str]


class FairEnqueuer:
    """``enqueue(instances, delay)`` with per-queue windows and per-tenant turns. What waits
    and takes a slot is a message: one instance, or a chunk of a large release.
    ``in_batch_lane(run_id)``: whether a run's messages wait in the batch lane (by default
    none do). ``together``: which small releases go as one message
    (:func:`~..runtime.chunks.chunked`)."""

    def __init__(self, send: Send, window: int, tenant_of: Callable[[str], str], *,
                 in_batch_lane: Callable[[str], bool] | None = None,
                 together: Together | None = None) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.send, self.window, self.tenant_of = send, window, tenant_of
        self.in_batch_lane = in_batch_lane or (lambda run_id: False)
        self.together = together
        self._lock = threading.Lock()
        self._in_flight: dict[str, set[str]] = {}  # queue -> message ids in the broker
        # (queue, lane) -> tenant -> waiting chunks; OrderedDict order is the round robin's
        self._waiting: dict[tuple[str, bool], OrderedDict[str, deque[Chunk]]] = {}
        # queue -> interactive messages taken while the batch lane waited
        self._interactive_turns: defaultdict[str, int] = defaultdict(int)
        self._held: set[str] = set()  # the waiting messages' chunk names

    def __call__(self, instances: Sequence[InstanceRecord], delay: float = 0.0) -> None:
        ready: list[tuple[Chunk, float]] = []
        if delay > 0:
            # A re-look after a lease's remaining time: it is already someone's turn.
            self._send([([inst], delay) for inst in instances])
            return
        with self._lock:
            for chunk in chunked(instances, self.together):
                key = _name(chunk)
                if key in self._held:
                    continue  # a duplicate send (sweeper) of one already waiting here
                self._held.add(key)
                run_id = chunk[0].run_id
                tenants = self._waiting.setdefault((chunk[0].queue, self.in_batch_lane(run_id)),
                                                   OrderedDict())
                tenant = self.tenant_of(run_id)
                if tenant not in tenants:
                    # A tenant with nothing waiting goes first (as FQ-CoDel favours sparse
                    # flows): its small run should not wait a turn behind a large one.
                    tenants[tenant] = deque()
                    tenants.move_to_end(tenant, last=False)
                tenants[tenant].append(chunk)
            ready.extend((chunk, 0.0) for chunk in self._take_all())
        self._send(ready)

    def finished(self, queue: str, message_id: str) -> None:
        """A message of ``queue`` ended (done, failed or skipped): let the next one in."""
        with self._lock:
            flight = self._in_flight.get(queue)
            if flight is None or message_id not in flight:
                return
            flight.discard(message_id)
            ready = [(chunk, 0.0) for chunk in self._take_all()]
        self._send(ready)

    def waiting(self, queue: str | None = None) -> int:
        """Messages waiting for their turn (of ``queue``, or of every queue)."""
        with self._lock:
            if queue is None:
                return len(self._held)
            return sum(len(fifo) for batch in (False, True)
                       for fifo in self._waiting.get((queue, batch), {}).values())

    def _take_all(self) -> list[Chunk]:
        """Every chunk that fits its queue's window, lanes and tenants in turn (lock held)."""
        out: list[Chunk] = []
        for queue in {queue for queue, _ in self._waiting}:
            flight = self._in_flight.setdefault(queue, set())
            while len(flight) + sum(c[0].queue == queue for c in out) < self.window:
                tenants = self._lane(queue)
                if tenants is None:
                    break
                tenant, fifo = next(iter(tenants.items()))
                chunk = fifo.popleft()
                tenants.pop(tenant)
                if fifo:
                    tenants[tenant] = fifo  # to the back of the turn order
                self._held.discard(_name(chunk))
                out.append(chunk)
        return out

    def _lane(self, queue: str) -> OrderedDict[str, deque[Chunk]] | None:
        """The lane whose turn it is on ``queue``, or None with nothing waiting (lock held)."""
        interactive = self._waiting.get((queue, False))
        batch = self._waiting.get((queue, True))
        if not batch:
            return interactive or None
        if not interactive or self._interactive_turns[queue] >= BATCH_TURN - 1:
            self._interactive_turns[queue] = 0
            return batch
        self._interactive_turns[queue] += 1
        return interactive

    def _send(self, ready: list[tuple[Chunk, float]]) -> None:
        for chunk, delay in ready:
            message_id = self.send(chunk, delay)
            with self._lock:
                self._in_flight.setdefault(chunk[0].queue, set()).add(message_id)


def _name(chunk: Chunk) -> str:
    return chunk_name(chunk[0].run_id, [inst.instance_id for inst in chunk])


class FairRelease(Middleware):
    """Tells the :class:`FairEnqueuer` when each message ends, whatever the outcome."""

    def __init__(self, fair: FairEnqueuer) -> None:
        self.fair = fair

    def after_process_message(self, broker: dramatiq.Broker,
                              message: dramatiq.MessageProxy, *, result: object = None,
                              exception: BaseException | None = None) -> None:
        # A retry is re-sent by Retries straight to the broker: it runs outside the window
        # (at most one extra message per failing one) rather than risk a slot never freed.
        self.fair.finished(q_name(message.queue_name), message.message_id)

    def after_skip_message(self, broker: dramatiq.Broker,
                           message: dramatiq.MessageProxy) -> None:
        self.fair.finished(q_name(message.queue_name), message.message_id)
