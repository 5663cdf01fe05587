"""The SQLite store copies its write-ahead log into the database on a thread of its own."""

from __future__ import annotations

import sqlite3
import threading
import time

from wait_util import until

from genloop.workers.stores import EventRecord, RunRecord, RunSpecRecord, SqliteStateStore
from genloop.workers.stores.sqlite_checkpoint import EVERY_COMMITS, Checkpointer


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "genloop-sqlite-checkpoint"]


def test_commits_are_checkpointed_off_the_writer_and_close_stops_the_thread(tmp_path):
    # Given a store, its database file as first written
    store = SqliteStateStore(tmp_path / "state.db")
    before = (tmp_path / "state.db").stat().st_size
    threads = len(_checkpoint_threads())

    # When it commits enough transactions for a checkpoint to be due
    for i in range(2 * EVERY_COMMITS):
        run = RunRecord(id=f"r{i}", spec_hash="h", pending_nodes=0, created_at=time.time())
        store.create_run(run, RunSpecRecord(spec={"i": i, "pad": "x" * 2000}, graph={}), [], [])
        store.append_event(f"r{i}", EventRecord(type="run.note", time=time.time()))

    # Then a thread of its own copies the log into the database (with checkpoints left to
    # the COMMITs turned off, nothing else would before the store closes)
    copied = before + EVERY_COMMITS * 2000  # at least the first due checkpoint's runs
    until(lambda: (tmp_path / "state.db").stat().st_size > copied,
          "the log copied into the database")
    assert len(_checkpoint_threads()) == threads + 1
    assert store.get_run(f"r{2 * EVERY_COMMITS - 1}").id == f"r{2 * EVERY_COMMITS - 1}"

    # When the store closes, the thread ends
    store.close()
    assert len(_checkpoint_threads()) == threads


def test_close_waits_for_a_checkpoint_in_progress(tmp_path):
    # Given a checkpoint running on the checkpointer's thread, held there by the test
    started, go = threading.Event(), threading.Event()

    class Held(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql.startswith("PRAGMA wal_checkpoint"):
                started.set()
                go.wait()
            return super().execute(sql, *args)

    threads = len(_checkpoint_threads())
    checkpointer = Checkpointer(lambda: sqlite3.connect(tmp_path / "state.db", factory=Held))
    for _ in range(EVERY_COMMITS):
        checkpointer.committed()
    assert started.wait(10)
    # When the checkpointer closes, Then close returns only once the checkpoint is done and
    # the thread has ended (its connection closed)
    closer = threading.Thread(target=checkpointer.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive()
    go.set()
    closer.join(10)
    assert not closer.is_alive() and len(_checkpoint_threads()) == threads


def test_the_storage_counted_holds_the_write_ahead_log_beside_the_database(tmp_path):
    # Given a store with writes in its log (a passive checkpoint copies it, never shrinks it)
    store = SqliteStateStore(tmp_path / "state.db")
    try:
        run = RunRecord(id="r", spec_hash="h", pending_nodes=0, created_at=time.time())
        store.create_run(run, RunSpecRecord(spec={}, graph={}), [], [])
        log = tmp_path / "state.db-wal"
        assert log.stat().st_size > 0
        # Then the bytes it counts are both files' (read again while a checkpoint may grow
        # the database)
        until(lambda: store.storage().bytes == (tmp_path / "state.db").stat().st_size
              + log.stat().st_size, "the storage counted to match both files")
    finally:
        store.close()
