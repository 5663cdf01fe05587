"""A run's end told to whoever waits on it, the moment the transaction that ends it commits.

``Run.wait`` and the event streams used to poll the run's status with a growing pause (0.05 s up
to 1 s), so a result reached its waiter up to a pause after the run had ended. A waiter now takes
a watch on the run (:meth:`~.base.StateStore.watch_end`) *before* it reads the status, and sleeps
on the watch: the store that commits a run's end wakes every watch on that run. A watch taken
before the read cannot miss an end committed after it, and an end committed before it shows in
the read. Polling stays as the fallback: a wait is bounded by the poll's pause all the same, so a
lost wake-up (a worker killed between its commit and its announcement) costs one pause.

In one process (the SQLite store of the embedded runtime) the watches are ``threading.Event``
objects (:class:`LocalRunEnds`); the Redis store publishes on a channel per run instead.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager


class EndWatch(ABC):
    """A watch on one run's end."""

    @abstractmethod
    def wait(self, timeout: float) -> bool:
        """Sleep until the run may have ended (True) or ``timeout`` seconds pass (False)."""


class _EventWatch(EndWatch):
    def __init__(self) -> None:
        self.ended = threading.Event()

    def wait(self, timeout: float) -> bool:
        return self.ended.wait(timeout)


class LocalRunEnds:
    """Watches on runs' ends within one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[str, set[_EventWatch]] = {}

    @contextmanager
    def watch(self, run_id: str) -> Iterator[EndWatch]:
        watch = _EventWatch()
        with self._lock:
            self._watches.setdefault(run_id, set()).add(watch)
        try:
            yield watch
        finally:
            with self._lock:
                watches = self._watches[run_id]
                watches.discard(watch)
                if not watches:
                    del self._watches[run_id]

    def announce(self, run_id: str) -> None:
        """Wake the run's watches (after the commit that ended it)."""
        with self._lock:
            watches = list(self._watches.get(run_id, ()))
        for watch in watches:
            watch.ended.set()
