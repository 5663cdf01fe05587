"""The SQLite store's group commit (genloop.workers.stores.sqlite_commit): a COMMIT that fails
tells every body of its batch, leaves none of their writes, and leaves the writer usable; close
makes the COMMIT a batch was left waiting on."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from wait_util import until

from genloop.sdk.errors import StoreError
from genloop.workers.stores.sqlite_commit import GroupCommit


def _connector(path):
    def connect() -> sqlite3.Connection:  # no busy wait: a locked file fails at once
        conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    return connect


def test_a_commit_that_fails_tells_its_body_writes_nothing_and_the_next_commits(tmp_path):
    connect = _connector(tmp_path / "db.sqlite")

    # Given a table whose rows must name a parent, checked only at COMMIT
    reader = connect()
    reader.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    reader.execute("CREATE TABLE child (pid INTEGER REFERENCES parent (id) "
                   "DEFERRABLE INITIALLY DEFERRED)")
    commit = GroupCommit(connect)
    try:
        # When a body writes a row whose parent is missing, so its COMMIT fails
        with pytest.raises(StoreError, match="sqlite: FOREIGN KEY constraint failed"):
            with commit.write() as conn:
                conn.execute("INSERT INTO child VALUES (1)")

        # Then nothing it wrote is stored, and the next transaction commits on the same writer
        assert reader.execute("SELECT count(*) FROM child").fetchone() == (0,)
        with commit.write() as conn:
            conn.execute("INSERT INTO parent VALUES (1)")
            conn.execute("INSERT INTO child VALUES (1)")
        assert reader.execute("SELECT count(*) FROM child").fetchone() == (1,)
    finally:
        commit.close()
        reader.close()


def test_bodies_queued_behind_one_share_its_commit_and_one_that_raises_loses_only_its_own(
        tmp_path):
    connect = _connector(tmp_path / "db.sqlite")
    reader = connect()
    reader.execute("CREATE TABLE t (v INTEGER)")
    commit = GroupCommit(connect)
    raised: list[str] = []

    def body(value: int, fail: bool) -> None:
        try:
            with commit.write() as conn:
                conn.execute("INSERT INTO t VALUES (?)", (value,))
                if fail:
                    raise ValueError(f"body {value} failed")
        except ValueError as exc:
            raised.append(str(exc))

    try:
        # Given a body on the writer, and two more queued behind it: one that will raise
        with commit.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            others = [threading.Thread(target=body, args=(v, v == 2)) for v in (2, 3)]
            for thread in others:
                thread.start()
            # (white box: the count of bodies queued is what makes the first one not commit)
            until(lambda: commit._waiting == 2, "two bodies queued behind the first")
        # Then the first returned once the batch's one COMMIT held every write that stayed:
        # the one that raised lost only its own, and heard its own error
        assert sorted(reader.execute("SELECT v FROM t").fetchall()) == [(1,), (3,)]
        for thread in others:
            thread.join(10)
        assert raised == ["body 2 failed"]
    finally:
        commit.close()
        reader.close()


def test_a_transaction_that_cannot_begin_says_why_and_the_writer_begins_again_later(tmp_path):
    connect = _connector(tmp_path / "db.sqlite")
    other = connect()
    other.execute("CREATE TABLE t (v INTEGER)")
    commit = GroupCommit(connect)
    try:
        # Given another process holding the file's write lock
        other.execute("BEGIN EXCLUSIVE")
        # When a transaction begins, Then it is refused with SQLite's reason, running nothing
        ran = []
        with pytest.raises(StoreError, match="^sqlite: database is locked$"):
            with commit.write():
                ran.append(True)
        assert ran == []
        # When the lock is let go, Then the next transaction commits
        other.execute("COMMIT")
        with commit.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
        assert other.execute("SELECT v FROM t").fetchall() == [(1,)]
    finally:
        commit.close()
        other.close()


def test_close_commits_the_batch_left_waiting_and_a_failed_commit_tells_its_body_why(tmp_path):
    connect = _connector(tmp_path / "db.sqlite")
    reader = connect()
    reader.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    reader.execute("CREATE TABLE child (pid INTEGER REFERENCES parent (id) "
                   "DEFERRABLE INITIALLY DEFERRED)")
    commit = GroupCommit(connect)
    outcome: list[str] = []

    def body() -> None:
        try:
            with commit.write() as conn:
                conn.execute("INSERT INTO child VALUES (1)")  # its COMMIT will fail
                # (white box: a body counted in line behind it, which never takes its turn,
                # so this one leaves the COMMIT to whoever writes next)
                with commit._count:
                    commit._waiting += 1
            outcome.append("committed")
        except StoreError as exc:
            outcome.append(str(exc))

    # Given a body whose writes wait on a COMMIT nobody else in line will make
    writer = threading.Thread(target=body)
    writer.start()
    until(lambda: commit._batch is not None and not commit._turn.locked(),
          "the body waits on its batch's commit")
    # When the writer closes, Then close makes that COMMIT; it fails, and the body hears why
    commit.close()
    writer.join(10)
    assert outcome == ["sqlite: FOREIGN KEY constraint failed"]
    assert reader.execute("SELECT count(*) FROM child").fetchone() == (0,)
    reader.close()
