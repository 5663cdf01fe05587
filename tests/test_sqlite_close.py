"""Closing the SQLite store while other threads still use it (the embedded runtime closes it
while a completion thread may be mid-transaction): close waits for the transaction on the
writer's connection, commits it, and every later use raises StoreError. Closing a connection
under a running statement crashed the whole process in SQLite's C code (seen in CI)."""

from __future__ import annotations

import threading
import time

import pytest

from genloop.sdk.errors import StoreError
from genloop.workers.stores import EventRecord, RunRecord, RunSpecRecord, SqliteStateStore


def _store_with_run(path) -> SqliteStateStore:
    store = SqliteStateStore(path)
    run = RunRecord(id="r", spec_hash="h", pending_nodes=0, created_at=time.time())
    store.create_run(run, RunSpecRecord(spec={}, graph={}), [], [])
    return store


def test_close_waits_for_the_transaction_in_flight_and_keeps_its_writes(tmp_path):
    # Given a thread inside a write transaction that has not written yet
    store = _store_with_run(tmp_path / "state.db")
    inside, outcome = threading.Event(), []

    def write_slowly() -> None:
        try:
            with store.transaction("r") as tx:
                inside.set()
                time.sleep(0.3)
                tx.event(EventRecord(type="run.note", time=time.time(), message="late"))
            outcome.append("committed")
        except Exception as exc:  # what the thread met, for the assertion below
            outcome.append(repr(exc))

    writer = threading.Thread(target=write_slowly)
    writer.start()
    assert inside.wait(5)

    # When the store closes meanwhile
    store.close()
    writer.join(5)

    # Then the transaction finished on an open connection and its write is in the file
    assert outcome == ["committed"]
    reopened = SqliteStateStore(tmp_path / "state.db")
    assert [e.message for e in reopened.events("r") if e.type == "run.note"] == ["late"]
    reopened.close()


def test_a_closed_store_refuses_reads_and_writes_with_a_store_error(tmp_path):
    # Given a closed store, and a thread that had read from it before
    store = _store_with_run(tmp_path / "state.db")
    reads = []
    reader = threading.Thread(target=lambda: reads.append(store.get_run("r").id))
    reader.start()
    reader.join(5)
    store.close()

    # Then reads (on this thread's connection and on a new thread's) and writes raise
    # StoreError, not sqlite3's ProgrammingError
    with pytest.raises(StoreError, match="^sqlite: the store is closed$"):
        store.get_run("r")
    with pytest.raises(StoreError, match="^sqlite: the store is closed$"):
        store.append_event("r", EventRecord(type="run.note", time=time.time()))
    late: list[BaseException] = []

    def read_late() -> None:
        try:
            store.events("r")
        except StoreError as exc:
            late.append(exc)

    thread = threading.Thread(target=read_late)
    thread.start()
    thread.join(5)
    assert reads == ["r"] and [str(e) for e in late] == ["sqlite: the store is closed"]


def test_close_under_many_busy_threads_ends_each_with_a_commit_or_a_store_error(tmp_path):
    # Given threads writing and reading as fast as they can
    store = _store_with_run(tmp_path / "state.db")
    stop, ends = threading.Event(), []

    def busy() -> None:
        written = 0
        try:
            while not stop.is_set():
                store.append_event("r", EventRecord(type="run.note", time=time.time()))
                written += 1
                store.events("r", limit=5)
        except StoreError:
            ends.append(written)

    threads = [threading.Thread(target=busy) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.3)

    # When the store closes under them
    store.close()
    for t in threads:
        t.join(5)
    stop.set()

    # Then each thread stopped on a StoreError, and every write it returned from is in the file
    assert len(ends) == 6
    reopened = SqliteStateStore(tmp_path / "state.db")
    notes = [e for e in reopened.events("r", limit=100_000) if e.type == "run.note"]
    assert len(notes) == sum(ends)
    reopened.close()
