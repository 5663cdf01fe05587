"""Re-enqueues outbox entries that a crashed worker left behind.

Completing a node writes its released children to the outbox in the same transaction; the
worker enqueues them right after the commit and clears the entries. If it dies in between, the
entries stay. Every worker process runs this sweeper thread, but only the one holding the
store's ``sweeper`` lock acts on a tick, so entries are not re-sent by every process at once.
(Re-sending twice would be harmless anyway: claims make the second delivery a no-op.)

It also re-sends instances that nothing has touched for ``stale_after`` seconds (default five
minutes): a message can be lost without any crash of ours, e.g. stuck in the ack set of a live
worker that could not ack it while Redis restarted.
"""

from __future__ import annotations

import logging
import threading
import uuid

from dramatiq.middleware import Middleware

from ..scheduler import Scheduler

log = logging.getLogger(__name__)


class OutboxSweeper(Middleware):
    """Starts with the Dramatiq worker, stops with it."""

    def __init__(self, scheduler: Scheduler, every: float = 5.0,
                 stale_after: float | None = 300.0) -> None:
        self.scheduler = scheduler
        self.every = every
        self.stale_after = stale_after
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner = f"sweeper-{uuid.uuid4().hex[:8]}"

    def after_worker_boot(self, broker, worker):
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="genloop-sweeper")
        self._thread.start()

    def before_worker_shutdown(self, broker, worker):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sweep_once()

    def sweep_once(self) -> int:
        try:
            if self.scheduler.store.try_lock("sweeper", self._owner, ttl=self.every * 2):
                n = self.scheduler.sweep(older_than=self.every, stale_after=self.stale_after)
                if n:
                    log.info("re-enqueued %d outbox entries left by a crashed worker", n)
                return n
        except Exception:  # the sweeper must outlive a store outage; it tries again next tick
            log.exception("outbox sweep failed")
        return 0
