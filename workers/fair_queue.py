"""Fair queuing in front of the broker: tenants take turns, so a small run is not stuck behind
another tenant's large one.

Dramatiq queues are FIFO: a 96-image run's 24 shard messages, sent at once, all sit ahead of a
1-image run sent a moment later. :class:`FairEnqueuer` keeps at most ``window`` messages per
queue in the broker; the rest wait here in one FIFO per tenant (the run's result namespace,
else the run), and each time a message of the queue finishes, the next one is taken from the
tenants in turn (round robin; a tenant that had nothing waiting goes to the front). A new
tenant's message therefore waits behind at most ``window`` messages, not behind everything
sent before it.

It needs to see every message it sent finish, so it is for a process whose workers run the
messages it sends (the embedded runtime, ``genloop serve --local``). A message held here is
``queued`` in the store; if the process dies, the sweeper re-sends it once it is stale, as it
would a message lost with a broker's memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

import dramatiq
from dramatiq.common import q_name
from dramatiq.middleware import Middleware

from .stores.records import InstanceRecord

Send = Callable[[InstanceRecord, float], str]


class FairEnqueuer:
    """``enqueue(instances, delay)`` with per-queue windows and per-tenant turns."""

    def __init__(self, send: Send, window: int, tenant_of: Callable[[str], str]) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.send, self.window, self.tenant_of = send, window, tenant_of
        self._lock = threading.Lock()
        self._in_flight: dict[str, set[str]] = {}  # queue -> message ids in the broker
        # queue -> tenant -> waiting instances; OrderedDict order is the round robin's
        self._waiting: dict[str, OrderedDict[str, deque[InstanceRecord]]] = {}
        self._held: set[tuple[str, str]] = set()

    def __call__(self, instances: Sequence[InstanceRecord], delay: float = 0.0) -> None:
        ready: list[tuple[InstanceRecord, float]] = []
        with self._lock:
            for inst in instances:
                if delay > 0:
                    # A re-look after a lease's remaining time: it is already someone's turn.
                    ready.append((inst, delay))
                    continue
                key = (inst.run_id, inst.instance_id)
                if key in self._held:
                    continue  # a duplicate send (sweeper) of one already waiting here
                self._held.add(key)
                tenants = self._waiting.setdefault(inst.queue, OrderedDict())
                tenant = self.tenant_of(inst.run_id)
                if tenant not in tenants:
                    # A tenant with nothing waiting goes first (as FQ-CoDel favours sparse
                    # flows): its small run should not wait a turn behind a large one.
                    tenants[tenant] = deque()
                    tenants.move_to_end(tenant, last=False)
                tenants[tenant].append(inst)
            ready.extend((inst, 0.0) for inst in self._take_all())
        self._send(ready)

    def finished(self, queue: str, message_id: str) -> None:
        """A message of ``queue`` ended (done, failed or skipped): let the next one in."""
        with self._lock:
            flight = self._in_flight.get(queue)
            if flight is None or message_id not in flight:
                return
            flight.discard(message_id)
            ready = [(inst, 0.0) for inst in self._take_all()]
        self._send(ready)

    def waiting(self) -> int:
        with self._lock:
            return len(self._held)

    def _take_all(self) -> list[InstanceRecord]:
        """Every instance that fits its queue's window, tenants in turn (lock held)."""
        out = []
        for queue, tenants in self._waiting.items():
            flight = self._in_flight.setdefault(queue, set())
            while tenants and len(flight) + sum(i.queue == queue for i in out) < self.window:
                tenant, fifo = next(iter(tenants.items()))
                inst = fifo.popleft()
                tenants.pop(tenant)
                if fifo:
                    tenants[tenant] = fifo  # to the back of the turn order
                self._held.discard((inst.run_id, inst.instance_id))
                out.append(inst)
        return out

    def _send(self, ready: list[tuple[InstanceRecord, float]]) -> None:
        for inst, delay in ready:
            message_id = self.send(inst, delay)
            with self._lock:
                self._in_flight.setdefault(inst.queue, set()).add(message_id)


class FairRelease(Middleware):
    """Tells the :class:`FairEnqueuer` when each message ends, whatever the outcome."""

    def __init__(self, fair: FairEnqueuer) -> None:
        self.fair = fair

    def after_process_message(self, broker: dramatiq.Broker, message: dramatiq.Message, *,
                              result: object = None, exception: BaseException | None = None
                              ) -> None:
        # A retry is re-sent by Retries straight to the broker: it runs outside the window
        # (at most one extra message per failing one) rather than risk a slot never freed.
        self.fair.finished(q_name(message.queue_name), message.message_id)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.Message) -> None:
        self.fair.finished(q_name(message.queue_name), message.message_id)
