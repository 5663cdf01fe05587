"""A SQLite store whose file goes bad under it (a page a failing disk returns as garbage):
a read says so as a ``StoreError`` carrying SQLite's reason, the error every caller handles (the
gateway answers 503, a completion retries), not a bare ``sqlite3`` exception."""

from __future__ import annotations

import sqlite3
import threading

from test_sqlite_close import _store_with_run

from genloop.sdk.errors import StoreError


def _corrupt_table(path, table: str) -> None:
    """Overwrite the root page of ``table`` in the database file, its write-ahead log first
    folded into the file so that the page is read from there."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                               (table,)).fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)


def test_a_read_of_a_corrupt_page_is_a_store_error_with_sqlites_reason(tmp_path):
    # Given an opened store holding a run, whose runs table's page then goes bad on disk
    path = tmp_path / "state.db"
    store = _store_with_run(path)
    _corrupt_table(path, "runs")
    # When a thread with no cached pages reads the run
    errors: list[BaseException] = []

    def read() -> None:
        try:
            store.get_run("r")
        except BaseException as exc:  # what the thread met, for the assertion below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    # Then it meets a StoreError that names SQLite's reason
    (error,) = errors
    assert isinstance(error, StoreError)
    assert str(error) == "sqlite: database disk image is malformed"
    assert isinstance(error.__cause__, sqlite3.DatabaseError)
    store.close()
