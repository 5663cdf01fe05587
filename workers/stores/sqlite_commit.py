"""Group commit for the SQLite store: write transactions of many threads share one COMMIT.

Worker threads that complete instances at the same time queue for SQLite's single writer
anyway. Instead of each paying for its own ``BEGIN IMMEDIATE`` / ``COMMIT`` (a WAL append
each), the transactions that are queued run one after another inside one SQLite transaction,
each after the first in its own ``SAVEPOINT`` (so one that raises rolls back only its own
writes), and the last one in line commits for all. Nobody returns before the COMMIT that holds
its writes: a caller that enqueues what its transaction released (the outbox) never sends a
message for a record that could still be rolled back, and a crash loses only transactions
whose callers had not returned. A batch is committed at :attr:`GroupCommit.max_batch` members
at the latest, so callers at the head of a long queue are not kept waiting.

Seen from a caller, each transaction is serializable and atomic, as before: bodies run one at
a time on one connection, and each sees the writes of those before it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from genloop.sdk.errors import StoreError

from .sqlite_checkpoint import Checkpointer


class _Batch:
    def __init__(self) -> None:
        self.members = 0
        self.error: StoreError | None = None
        self._done = threading.Event()

    def finish(self, error: StoreError | None) -> None:
        self.error = error
        self._done.set()

    def wait(self) -> None:
        self._done.wait()
        if self.error is not None:
            raise self.error


class GroupCommit:
    """One writer connection; :meth:`write` is a transaction that may share its COMMIT."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], max_batch: int = 32) -> None:
        self.max_batch = max_batch
        self._conn = connect()
        # Checkpoints run on a thread of their own, not inside this connection's COMMITs.
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpoints = Checkpointer(connect)
        self._turn = threading.Lock()  # one body at a time
        self._count = threading.Lock()
        self._waiting = 0
        self._batch: _Batch | None = None
        self._closed = False

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self._count:
            self._waiting += 1
        self._turn.acquire()
        with self._count:
            self._waiting -= 1
        if self._closed:
            self._turn.release()
            raise StoreError("sqlite: the store is closed")
        try:
            batch, first = self._begin()
        except BaseException:
            self._turn.release()
            raise
        try:
            yield self._conn
        except BaseException:
            self._end(batch, first, ok=False)
            raise
        self._end(batch, first, ok=True)
        batch.wait()

    def _begin(self) -> tuple[_Batch, bool]:
        """Join the open batch in a savepoint, or open one. The body that opens a batch needs
        no savepoint (two statements less): nobody has joined yet, so should it fail, rolling
        back the whole transaction undoes only its own writes."""
        try:
            if self._batch is None:
                self._conn.execute("BEGIN IMMEDIATE")
                self._batch = _Batch()
                return self._batch, True
            self._conn.execute("SAVEPOINT genloop_tx")
        except sqlite3.Error as exc:
            self._abandon(self._batch, f"sqlite: {exc}")
            raise StoreError(f"sqlite: {exc}") from exc
        return self._batch, False

    def _end(self, batch: _Batch, first: bool, ok: bool) -> None:
        """Close this body's savepoint; commit the batch if nobody else is in line."""
        try:
            if first and not ok:
                self._conn.execute("ROLLBACK")
                self._batch = None
                batch.finish(None)
                return
            if not first:
                if not ok:
                    self._conn.execute("ROLLBACK TO genloop_tx")
                self._conn.execute("RELEASE genloop_tx")
            batch.members += ok
            with self._count:
                others = self._waiting
            if others == 0 or batch.members >= self.max_batch:
                self._settle(batch)
        except sqlite3.Error as exc:
            # SQLite may have rolled the whole transaction back (a full disk, an I/O error):
            # every body of the batch lost its writes and hears so.
            self._abandon(batch, f"sqlite: {exc}")
        finally:
            self._turn.release()

    def _settle(self, batch: _Batch) -> None:
        """End the open batch: commit what its bodies wrote and tell them. A batch open here
        holds at least its first body's writes: a first body that raises ends the batch."""
        self._batch = None
        self._conn.execute("COMMIT")
        self._checkpoints.committed()
        batch.finish(None)

    def _abandon(self, batch: _Batch | None, why: str) -> None:
        """Roll back whatever is open and tell every body of ``batch`` that its writes are lost.
        The batch is passed in: a failed COMMIT comes after :meth:`_settle` let go of it (its
        bodies once waited for a word that never came)."""
        self._batch = None
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        if batch is not None:
            batch.finish(StoreError(why))

    def close(self) -> None:
        """Close once the body on the connection has ended (closing under a body crashed the
        process in SQLite's C code), committing a batch whose bodies wait on a commit; a
        transaction that comes later raises :class:`StoreError`."""
        with self._turn:
            if self._closed:
                return
            self._closed = True
            batch = self._batch
            try:
                if batch is not None:
                    self._settle(batch)
            except sqlite3.Error as exc:
                self._abandon(batch, f"sqlite: {exc}")
            self._checkpoints.close()
            self._conn.close()
