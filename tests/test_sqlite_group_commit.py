"""The SQLite store's group commit (genloop.workers.stores.sqlite_commit): a COMMIT that fails
tells every body of its batch, leaves none of their writes, and leaves the writer usable; close
makes the COMMIT a batch was left waiting on, and a batch commits at its cap."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator

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


@pytest.fixture
def reader(tmp_path) -> Iterator[sqlite3.Connection]:
    """Another connection to a file with a table ``t``, and ``child`` rows that must name a
    ``parent``, checked only at COMMIT."""
    conn = _connector(tmp_path / "db.sqlite")()
    conn.execute("CREATE TABLE t (v INTEGER)")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE child (pid INTEGER REFERENCES parent (id) "
                 "DEFERRABLE INITIALLY DEFERRED)")
    yield conn
    conn.close()


@pytest.fixture
def writer(tmp_path, reader) -> Iterator[Callable[..., GroupCommit]]:
    """Makes a group commit on the reader's file (closed at the end, which commits whatever a
    batch still holds, so no body is left waiting)."""
    made: list[GroupCommit] = []

    def make(connect: Callable[[], sqlite3.Connection] | None = None,
             max_batch: int = 32) -> GroupCommit:
        made.append(GroupCommit(connect or _connector(tmp_path / "db.sqlite"), max_batch))
        return made[-1]

    yield make
    for commit in made:
        commit.close()


def _in_line(commit: GroupCommit, bodies: int) -> None:
    """(white box) Count ``bodies`` in line for the writer that never take their turn: a body
    that ends then leaves its COMMIT to whoever writes next, as when others wait."""
    with commit._count:
        commit._waiting += bodies


def _left_waiting(commit: GroupCommit, sql: str) -> tuple[threading.Thread, list[str]]:
    """A body that runs ``sql`` and leaves its COMMIT to the next writer (one counted in line),
    started and waiting on that COMMIT; what it hears ("committed" or the error) is listed."""
    heard: list[str] = []

    def body() -> None:
        try:
            with commit.write() as conn:
                conn.execute(sql)
                _in_line(commit, 1)
            heard.append("committed")
        except StoreError as exc:
            heard.append(str(exc))

    thread = threading.Thread(target=body)
    thread.start()
    until(lambda: commit._batch is not None and not commit._turn.locked(),
          "the body waits on its batch's commit")
    return thread, heard


def test_a_commit_that_fails_tells_its_body_writes_nothing_and_the_next_commits(reader, writer):
    commit = writer()
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


def test_bodies_queued_behind_one_share_its_commit_and_one_that_raises_loses_only_its_own(
        reader, writer):
    commit = writer()
    raised: list[str] = []

    def body(value: int, fail: bool) -> None:
        try:
            with commit.write() as conn:
                conn.execute("INSERT INTO t VALUES (?)", (value,))
                if fail:
                    raise ValueError(f"body {value} failed")
        except ValueError as exc:
            raised.append(str(exc))

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


def test_a_transaction_that_cannot_begin_says_why_and_the_writer_begins_again_later(
        reader, writer):
    commit = writer()
    # Given another process holding the file's write lock
    reader.execute("BEGIN EXCLUSIVE")
    # When a transaction begins, Then it is refused with SQLite's reason, running nothing
    ran = []
    with pytest.raises(StoreError, match="^sqlite: database is locked$"):
        with commit.write():
            ran.append(True)
    assert ran == []
    # When the lock is let go, Then the next transaction commits
    reader.execute("COMMIT")
    with commit.write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert reader.execute("SELECT v FROM t").fetchall() == [(1,)]


@pytest.mark.parametrize("commits", [True, False], ids=["commits", "fails"])
def test_close_makes_the_commit_a_batch_was_left_waiting_on_and_tells_its_body(
        reader, writer, commits):
    if commits:
        reader.execute("INSERT INTO parent VALUES (1)")
    commit = writer()
    # Given a body whose writes (whose COMMIT fails without a parent) wait on a COMMIT nobody
    # else in line will make
    waiting, outcome = _left_waiting(commit, "INSERT INTO child VALUES (1)")
    # When the writer closes, Then close makes that COMMIT, and the body hears how it went
    commit.close()
    waiting.join(10)
    assert outcome == (["committed"] if commits else ["sqlite: FOREIGN KEY constraint failed"])
    assert reader.execute("SELECT count(*) FROM child").fetchone() == ((1,) if commits else (0,))


def test_a_batch_commits_at_its_cap_though_more_bodies_wait(reader, writer):
    commit = writer(max_batch=2)
    done: list[int] = []

    def body(value: int) -> None:
        with commit.write() as conn:
            conn.execute("INSERT INTO t VALUES (?)", (value,))
        done.append(value)

    # Given bodies always in line behind the writer (none would ever commit for the rest)
    _in_line(commit, 5)
    # When two bodies write, Then the second fills the batch to its cap of two and commits for
    # both: each returns, with its write stored
    bodies = [threading.Thread(target=body, args=(v,)) for v in (1, 2)]
    for thread in bodies:
        thread.start()
    for thread in bodies:
        thread.join(10)
    assert sorted(done) == [1, 2]
    assert sorted(reader.execute("SELECT v FROM t").fetchall()) == [(1,), (2,)]


def test_a_first_body_that_raises_writes_nothing_and_the_writer_goes_on(reader, writer):
    commit = writer()
    # Given the body that opens a batch, which raises after writing
    with pytest.raises(ValueError, match="^its own error$"):
        with commit.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            raise ValueError("its own error")
    # Then its write is gone, and the next body opens a batch of its own and commits
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)
    with commit.write() as conn:
        conn.execute("INSERT INTO t VALUES (2)")
    assert reader.execute("SELECT v FROM t").fetchall() == [(2,)]


def test_a_savepoint_refused_tells_the_bodies_already_in_the_batch(tmp_path, reader, writer):
    refuse = threading.Event()

    def connect() -> sqlite3.Connection:
        conn = _connector(tmp_path / "db.sqlite")()
        # SQLite's authorizer refuses the next SAVEPOINT as a real failure would come
        conn.set_authorizer(lambda action, verb, *_: sqlite3.SQLITE_DENY if (
            action == sqlite3.SQLITE_SAVEPOINT and verb == "BEGIN" and refuse.is_set())
            else sqlite3.SQLITE_OK)
        return conn

    commit = writer(connect)
    # Given a body whose writes wait on the batch's COMMIT
    waiting, first = _left_waiting(commit, "INSERT INTO t VALUES (1)")
    # When the next body cannot open its savepoint in that batch
    refuse.set()
    with pytest.raises(StoreError, match="^sqlite: not authorized$"):
        with commit.write():
            pass
    # Then the waiting body hears that its writes are lost, and why
    waiting.join(10)
    assert first == ["sqlite: not authorized"]
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)
