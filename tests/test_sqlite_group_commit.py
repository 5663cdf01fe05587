"""The SQLite store's group commit (genloop.workers.stores.sqlite_commit): a COMMIT that fails
tells every body of its batch, leaves none of their writes, and leaves the writer usable."""

from __future__ import annotations

import sqlite3

import pytest

from genloop.sdk.errors import StoreError
from genloop.workers.stores.sqlite_commit import GroupCommit


def test_a_commit_that_fails_tells_its_body_writes_nothing_and_the_next_commits(tmp_path):
    path = tmp_path / "db.sqlite"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

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
