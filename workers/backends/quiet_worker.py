"""A StubBroker and a Dramatiq Worker whose idle threads sleep until there is work or a stop.

Why: Dramatiq's threads poll. A worker thread waits ``worker_timeout`` for its work queue, a
consumer thread as long for its broker queue, and each loops to check whether it should stop
(and, for a delay queue, whether a held message's eta has passed). The embedded runtime ran them
at 50 ms so that ``Client.close()`` and delayed retries were prompt: about 300 wake-ups a second
on an idle runtime, each taking the GIL, which slowed the worker's import of torch and diffusers
in a fresh process by about a second (docs/benchmarks.md, cold start).

Here every wait is woken by what it waits for: a message put on a queue (as before), a stop
(:meth:`QuietWorker.stop` wakes every queue its threads wait on) and, for a consumer, the eta of
the first message its thread holds back (the wait ends then). :data:`IDLE_WAIT` only bounds a
wait nothing woke. Dramatiq has no hook for these waits, so this replaces its queues (the
worker's work queue and the broker's, through ``declare_queue``) with ones that can be woken,
and its Stub consumer with one that waits no longer than the next eta.
"""

from __future__ import annotations

import threading
import time
from queue import Empty, PriorityQueue, Queue
from typing import Any, cast

import dramatiq
from dramatiq.brokers.stub import StubBroker, _StubConsumer
from dramatiq.common import current_millis, dq_name
from dramatiq.errors import QueueNotFound

#: Longest idle wait of a thread, seconds, when nothing wakes it: a bound, not a poll.
IDLE_WAIT = 10.0


class _Wakeable:
    """A :class:`queue.Queue` whose blocked ``get`` a :meth:`wake` ends with ``Empty``.

    The stdlib's ``get`` is rewritten for the one change: after a wake an empty queue raises at
    once instead of waiting out the timeout (a notify alone would find the queue still empty and
    wait again).
    """

    woken = False

    def wake(self) -> None:
        with self.not_empty:  # type: ignore[attr-defined]
            self.woken = True
            self.not_empty.notify_all()  # type: ignore[attr-defined]

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self.not_empty:  # type: ignore[attr-defined]
            end = None if timeout is None else time.monotonic() + timeout
            while not self._qsize():  # type: ignore[attr-defined]
                remaining = None if end is None else end - time.monotonic()
                if not block or self.woken or (remaining is not None and remaining <= 0):
                    raise Empty
                self.not_empty.wait(remaining)  # type: ignore[attr-defined]
            item = self._get()  # type: ignore[attr-defined]
            self.not_full.notify()  # type: ignore[attr-defined]
            return item


class WakeableQueue(_Wakeable, Queue):
    pass


class WakeablePriorityQueue(_Wakeable, PriorityQueue):
    pass


class _QuietConsumer(_StubConsumer):
    """A Stub consumer that waits for a message until the first eta its thread holds back.

    Dramatiq's ``ConsumerThread`` keeps a delayed message in its own ``delay_queue`` and sends it
    on only when its consumer returns (a message or ``None``); ``consume`` runs on that thread,
    so the consumer reads the thread's heap to know how long it may wait.
    """

    def __init__(self, *args: Any, thread: threading.Thread) -> None:
        super().__init__(*args)
        self.thread = thread

    def __next__(self) -> Any:
        held = getattr(self.thread, "delay_queue", None)
        if held is not None and held.queue:
            self.timeout = max(0, min(IDLE_WAIT * 1000, held.queue[0].priority - current_millis()))
        else:
            self.timeout = IDLE_WAIT * 1000
        return super().__next__()


class QuietStubBroker(StubBroker):
    """:class:`~dramatiq.brokers.stub.StubBroker` with wakeable queues and quiet consumers."""

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 100) -> _QuietConsumer:
        if queue_name not in self.queues:
            raise QueueNotFound(queue_name)
        return _QuietConsumer(self.queues[queue_name], self.dead_letters_by_queue[queue_name],
                              prefetch, timeout, thread=threading.current_thread())

    def declare_queue(self, queue_name: str) -> None:
        # StubBroker's own, with wakeable queues: they must be in place before the declaration's
        # events start a consumer thread on them.
        if queue_name in self.queues:
            return
        delayed = dq_name(queue_name)
        self.emit_before("declare_queue", queue_name)
        self.queues[queue_name] = WakeableQueue()
        self.emit_after("declare_queue", queue_name)
        self.queues[delayed] = WakeableQueue()
        self.delay_queues.add(delayed)
        self.emit_after("declare_delay_queue", delayed)


class QuietWorker(dramatiq.Worker):
    """A Dramatiq ``Worker`` on a :class:`QuietStubBroker` whose ``stop`` wakes its threads."""

    def __init__(self, broker: QuietStubBroker, *, worker_threads: int) -> None:
        super().__init__(broker, worker_threads=worker_threads,
                         worker_timeout=int(IDLE_WAIT * 1000))
        self.work_queue = WakeablePriorityQueue()

    def stop(self, timeout: int = 600_000) -> None:
        # Dramatiq stops (and joins) the worker threads first, then the consumer threads: each
        # is told to stop here first and woken, so the joins below wait for no idle timeout.
        # A consumer stopped while a worker thread still runs its message is fine on the stub:
        # the worker thread acks through the consumer object, which outlives its thread.
        for worker_thread in self.workers:
            worker_thread.stop()
        for thread in self.consumers.values():
            thread.stop()
        cast(WakeablePriorityQueue, self.work_queue).wake()
        queues = cast(QuietStubBroker, self.broker).queues
        for thread in self.consumers.values():
            # Its consumer, if made yet, may wait for a prefetch slot or on its queue; one made
            # after this finds its queue woken.
            queues[thread.queue_name].wake()
            if thread.consumer is not None:
                thread.consumer.prefetch_semaphore.release()  # type: ignore[attr-defined]
        super().stop(timeout)
