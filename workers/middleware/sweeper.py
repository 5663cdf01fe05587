"""Recovery driven by the state genloop keeps: re-sends what a fault left behind.

Every worker process runs this sweeper thread, but only the one holding the store's ``sweeper``
lock acts on a tick, so work is not re-sent by every process at once. (Re-sending twice would be
harmless anyway: claims make the second delivery a no-op.) Each tick
(:func:`genloop.workers.runtime.recovery.sweep`):

- enqueues outbox entries a worker left when it died between committing a completion and
  enqueuing the children it released;
- re-sends unfinished instances that nobody works on: running ones whose lease has ended (the
  worker died, or lost Redis), queued ones whose message is gone (deleted, or stuck in the ack set
  of a live worker after a Redis restart) once their queue has no backlog. ``grace`` (the lease
  TTL by default) is how long an instance must have been left alone first.

Worst-case recovery times, with lease TTL ``L`` (renewed every ``L/3``) and tick ``S``:
a SIGKILLed worker's item runs again within ``L + S``; after a Redis restart from its
append-only file, and for a lost message, within ``L + 2S`` (plus the wait for the queue's
backlog, for a lost queued message). The pool's defaults (``L`` = 15 s, ``S`` = 5 s) give 20 s
and 25 s. Dramatiq's own heartbeat requeue is no longer needed for recovery.

A record that cannot be read is quarantined with an ``instance.quarantined`` event and an error
log, and the tick goes on with the rest.

The lock's holder also runs the retention pass (:mod:`genloop.workers.stores.retention`) once every
``RETENTION_EVERY`` seconds (expired runs and results go, in passes of a bounded size) and,
given the artifact store, collects the artifacts nothing kept names once every
``COLLECT_EVERY`` seconds (:mod:`genloop.workers.artifacts.gc`; grace: the retention).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from dramatiq.middleware import Middleware

from ..artifacts.base import ArtifactStore
from ..artifacts.gc import collect
from ..metrics.prometheus import metrics
from ..runtime.recovery import sweep
from ..runtime.scheduler import Scheduler
from ..stores.holders import process_tag
from ..stores.retention import retention_pass

log = logging.getLogger(__name__)

#: Seconds between two retention passes of the sweeper that holds the lock.
RETENTION_EVERY = 60.0
#: Seconds between two artifact collections (each reads every stored result and spec).
COLLECT_EVERY = 3600.0


class OutboxSweeper(Middleware):
    """Starts with the Dramatiq worker, stops with it. ``grace=None`` only flushes the outbox."""

    def __init__(self, scheduler: Scheduler, every: float = 5.0,
                 grace: float | None = 30.0, artifacts: ArtifactStore | None = None) -> None:
        self.scheduler = scheduler
        self.artifacts = artifacts
        self.every = every
        self.grace = grace
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner = f"sweeper-{uuid.uuid4().hex[:8]}{process_tag()}"
        self._retained_at = 0.0
        self._collected_at = time.monotonic()  # not at start: a process's start stays cheap

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

    def _bound_storage(self) -> None:
        """The retention pass and the artifact collection, each when its time has come."""
        store, now = self.scheduler.store, time.monotonic()
        if now - self._retained_at >= RETENTION_EVERY:
            self._retained_at = now
            expired = retention_pass(store, store.retention)
            metrics().expired_now(expired.runs, expired.results)
        if self.artifacts is not None and now - self._collected_at >= COLLECT_EVERY:
            self._collected_at = now
            done = collect(store, self.artifacts, store.retention)
            metrics().artifacts_collected(done.stored - done.deleted,
                                          done.stored_bytes - done.deleted_bytes, done.deleted)

    def sweep_once(self) -> int:
        try:
            if self.scheduler.store.try_lock("sweeper", self._owner, ttl=self.every * 2):
                n = sweep(self.scheduler, older_than=self.every, grace=self.grace)
                if n:
                    log.info("re-sent %d message(s) left behind by a fault", n)
                self._bound_storage()
                return n
        except Exception:  # the sweeper must outlive a store outage; it tries again next tick
            log.exception("sweep failed")
        return 0
