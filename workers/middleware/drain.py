"""Graceful drain: a worker told to stop (SIGTERM, a scale-down) gives its work back at once.

Dramatiq's shutdown lets each worker thread finish the message it holds and puts the messages it
prefetched back on their queues. What it cannot see is genloop's deferred work (see
:mod:`genloop.workers.runtime.deferred`): acked messages whose instances wait in this process's
engine or scorer under a lease, which a plain exit leaves to lease expiry (a lease ttl plus a sweep
tick, about 20 s with the pool's defaults). Here, when the shutdown begins, the executor hands back
the requests its resources have not started (lease released, instance re-sent at the same attempt),
and so does every deferral a worker thread makes until the threads stop. What is running may
finish until the grace, less :data:`EXIT_RESERVE`, has passed since the shutdown began; what is
unfinished then is handed back too, and the process exits. A SIGKILL still falls back to lease
expiry.
"""

from __future__ import annotations

import time

import dramatiq
from dramatiq.middleware import Middleware

from ..runtime.executor import Executor

#: Seconds of a worker's grace kept for what follows the drain: Dramatiq notices the signal
#: within a second, the engine stops its running batch at the next step, the interpreter exits.
EXIT_RESERVE = 2.0


class Drain(Middleware):
    """Hands back a stopping worker's deferred work; ``grace``: seconds from the signal to the
    process's exit."""

    def __init__(self, executor: Executor, grace: float) -> None:
        self.executor, self.grace = executor, grace
        self._deadline = 0.0

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._deadline = time.monotonic() + max(0.0, self.grace - EXIT_RESERVE)
        self.executor.start_draining()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.executor.drain(max(0.0, self._deadline - time.monotonic()))
