"""Write-ahead log checkpoints for the SQLite store, off the writer's thread.

SQLite's automatic checkpoint (copying the log's pages into the database once the log passes
1,000 pages) runs inside the COMMIT that crosses the threshold, on the committing thread, with
the write lock held: at genloop's write rate it was about half of an average COMMIT's time
(~340 -> ~170 us with it off, measured on the store's own steps). So the writer's connection has
it off and a :class:`Checkpointer` runs a PASSIVE checkpoint, which never blocks writers or
readers, on a thread of its own every :data:`EVERY_COMMITS` commits. SQLite releases the GIL
while it copies, so on a second core the copy costs the worker threads nothing. Durability is
unchanged: a committed transaction is in the log, which SQLite replays after a crash.

Hand-written: Python's ``sqlite3`` exposes no ``wal_hook`` and no library runs checkpoints for a
connection.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Commits between checkpoints: each of genloop's commits writes ~10-20 pages of log, so this
#: is about SQLite's own 1,000-page threshold.
EVERY_COMMITS = 64


class Checkpointer:
    """Checkpoints the database ``connect`` opens, on its own thread and connection, after every
    :data:`EVERY_COMMITS` calls of :meth:`committed`. The thread starts at the first one due."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._commits = 0
        self._due = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def committed(self) -> None:
        """A write transaction committed (called under the writer's lock: no race on the count)."""
        self._commits += 1
        if self._commits < EVERY_COMMITS:
            return
        self._commits = 0
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="genloop-sqlite-checkpoint")
                self._thread.start()
        self._due.set()

    def _run(self) -> None:
        conn = self._connect()
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._closed:
                    return
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:  # the next one copies what this one could not
                    log.warning("sqlite checkpoint failed", exc_info=True)
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the thread (SQLite checkpoints what is left when the last connection closes)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join()
