"""SQLite state store for the embedded runtime: one file under the client's home, WAL mode, so
runs survive a crash of the process and ``resume`` can finish them.

Each thread reads on its own connection. Writes go through one connection in ``BEGIN
IMMEDIATE`` transactions (SQLite takes the database's write lock up front, which makes every
transaction serializable; one writer at a time is plenty for one process), and concurrent ones
share a commit (``sqlite_commit.py``). An instance's start and finish take a shorter path of
their own (``sqlite_steps.py``), the starts or finishes of a chunk's instances (``chunks.py``)
in one transaction.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from genloop.sdk.errors import NotFound, StoreError
from genloop.sdk.models import Event

from . import sqlite_steps
from .base import (
    DEFAULT_RETENTION,
    READ_BATCH,
    IdempotencyConflict,
    RunTx,
    StateStore,
    creation_events,
)
from .holders import holder_gone
from .records import (
    EventRecord,
    InstanceRecord,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
    Storage,
)
from .run_ends import EndWatch, LocalRunEnds
from .sqlite_commit import GroupCommit
from .steps import Finish, FinishOutcome, Start, Started

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, idem_key TEXT UNIQUE, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run_specs (id TEXT PRIMARY KEY, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run_index (
    created_at REAL NOT NULL, id TEXT NOT NULL, PRIMARY KEY (created_at, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nodes (
    run_id TEXT, node_id TEXT, doc TEXT NOT NULL, PRIMARY KEY (run_id, node_id));
CREATE TABLE IF NOT EXISTS instances (
    run_id TEXT, instance_id TEXT, node_id TEXT, seq INTEGER, doc TEXT NOT NULL,
    live INTEGER NOT NULL, touched REAL NOT NULL, PRIMARY KEY (run_id, instance_id));
CREATE INDEX IF NOT EXISTS instances_by_node ON instances (run_id, node_id, seq);
CREATE INDEX IF NOT EXISTS live_instances ON instances (live, touched);
CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT, expires REAL);
CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, owner TEXT, expires REAL);
CREATE TABLE IF NOT EXISTS outbox (
    run_id TEXT, instance_id TEXT, at REAL, PRIMARY KEY (run_id, instance_id));
CREATE TABLE IF NOT EXISTS run_ended (run_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS run_pins (run_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS run_expiry (run_id TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS run_expiry_at ON run_expiry (at);
CREATE TABLE IF NOT EXISTS result_until (key TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS result_until_at ON result_until (at);
CREATE TABLE IF NOT EXISTS ended_counts (
    run_id TEXT NOT NULL, node_id TEXT NOT NULL, items INTEGER NOT NULL,
    PRIMARY KEY (run_id, node_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL, id INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
"""

#: A store from before event ids were per run kept them in one table with global ids; they are
#: renumbered per run (same order), so a client's Last-Event-ID from then resumes a little early.
_MIGRATE_EVENTS = """
INSERT OR IGNORE INTO run_events (run_id, id, doc)
    SELECT run_id, ROW_NUMBER() OVER (PARTITION BY run_id ORDER BY id), doc FROM events;
DROP TABLE events;
"""

#: A store from before specs had their own table kept each in its run's row: every write of the
#: run's small state (once per completion) rewrote the whole spec with it (SQLite rewrites a
#: row whole), which made a 1,000-node run's commits ~100 KB each.
#: A store from before runs were listed: its runs enter the listing's index once.
_INDEX_RUNS = """
INSERT OR IGNORE INTO run_index (created_at, id)
    SELECT json_extract(doc, '$.created_at'), id FROM runs;
"""

#: A store from before retention: its finished runs wait for the retention pass like new ones.
_INDEX_ENDED = """
INSERT OR IGNORE INTO run_ended (run_id)
    SELECT id FROM runs WHERE json_extract(doc, '$.finished_at') IS NOT NULL;
"""

#: Where a run's rows live besides ``runs``, with the column naming the run.
_RUN_TABLES = (("run_specs", "id"), ("nodes", "run_id"),
               ("instances", "run_id"), ("outbox", "run_id"), ("run_events", "run_id"),
               ("run_ended", "run_id"), ("run_pins", "run_id"), ("ended_counts", "run_id"))

_MIGRATE_SPECS = """
INSERT OR IGNORE INTO run_specs (id, spec) SELECT id, spec FROM runs;
ALTER TABLE runs DROP COLUMN spec;
"""


class _SqliteTx(RunTx):
    def __init__(self, conn: sqlite3.Connection, run_id: str) -> None:
        self._c = conn
        self._run_id = run_id
        self.ended = False  # the transaction wrote the run ended: announced once it commits

    def run(self) -> RunRecord:
        row = self._c.execute("SELECT doc FROM runs WHERE id = ?", (self._run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {self._run_id!r}")
        return RunRecord.model_validate_json(row[0])

    def put_run(self, run: RunRecord) -> None:
        self._c.execute("UPDATE runs SET doc = ? WHERE id = ?", (run.model_dump_json(), run.id))
        self.ended = run.status.terminal
        if run.finished_at is not None:
            self._c.execute("INSERT OR IGNORE INTO run_ended VALUES (?)", (run.id,))

    def pin(self, pinned: bool) -> None:
        sql = "INSERT OR IGNORE INTO run_pins VALUES (?)" if pinned else \
            "DELETE FROM run_pins WHERE run_id = ?"
        self._c.execute(sql, (self._run_id,))

    def ended_counts(self) -> dict[str, int]:
        return dict(self._c.execute("SELECT node_id, items FROM ended_counts WHERE run_id = ?",
                                    (self._run_id,)).fetchall())

    def count_ended(self, node_id: str, items: int) -> None:
        self._c.execute("INSERT OR REPLACE INTO ended_counts VALUES (?, ?, ?)",
                        (self._run_id, node_id, items))

    def node(self, node_id: str) -> NodeRecord:
        row = self._c.execute(
            "SELECT doc FROM nodes WHERE run_id = ? AND node_id = ?", (self._run_id, node_id)
        ).fetchone()
        if row is None:
            raise NotFound(f"no node {node_id!r} in run {self._run_id!r}")
        return NodeRecord.model_validate_json(row[0])

    def put_node(self, node: NodeRecord) -> None:
        self._c.execute(
            "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?)",
            (node.run_id, node.node_id, node.model_dump_json()),
        )

    def instance(self, instance_id: str) -> InstanceRecord:
        row = self._c.execute(
            "SELECT doc FROM instances WHERE run_id = ? AND instance_id = ?",
            (self._run_id, instance_id),
        ).fetchone()
        if row is None:
            raise NotFound(f"no instance {instance_id!r} in run {self._run_id!r}")
        return InstanceRecord.model_validate_json(row[0])

    def instances(self, node_id: str) -> list[InstanceRecord]:
        rows = self._c.execute(
            "SELECT doc FROM instances WHERE run_id = ? AND node_id = ? ORDER BY seq",
            (self._run_id, node_id),
        )
        return [InstanceRecord.model_validate_json(r[0]) for r in rows]

    def put_instance(self, instance: InstanceRecord) -> None:
        _put_instance(self._c, instance)

    def add_outbox(self, instance_ids: Sequence[str]) -> None:
        now = time.time()
        self._c.executemany(
            "INSERT OR REPLACE INTO outbox VALUES (?, ?, ?)",
            [(self._run_id, i, now) for i in instance_ids],
        )

    def event(self, event: EventRecord) -> None:
        _append_event(self._c, self._run_id, event)

    def release(self, key: str, owner: str) -> None:
        self._c.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, owner))


def _put_result(conn: sqlite3.Connection, result: ResultRecord) -> ResultRecord:
    row = conn.execute("SELECT doc FROM results WHERE key = ?", (result.key,)).fetchone()
    if row is not None:
        return ResultRecord.model_validate_json(row[0])
    conn.execute("INSERT INTO results VALUES (?, ?)", (result.key, result.model_dump_json()))
    return result


def _put_instance(conn: sqlite3.Connection, inst: InstanceRecord) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO instances VALUES (?, ?, ?, ?, ?, ?, ?)",
        (inst.run_id, inst.instance_id, inst.node_id, inst.seq, inst.model_dump_json(),
         0 if inst.status.terminal else 1, time.time()),
    )


def _take(conn: sqlite3.Connection, table: str, key: str, owner: str, ttl: float) -> float:
    """Insert-or-steal a lease row in ``claims`` or ``locks`` (both keyed by ``key``): 0 when
    taken, else the seconds left on the holder's lease. A lease whose holder process is gone
    (:func:`.holders.holder_gone`) is taken at once."""
    now = time.time()
    row = conn.execute(f"SELECT owner, expires FROM {table} WHERE key = ?", (key,)).fetchone()
    if row is not None and row[0] != owner and row[1] > now and not holder_gone(row[0]):
        return row[1] - now
    conn.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", (key, owner, now + ttl))
    return 0.0


def _append_event(conn: sqlite3.Connection, run_id: str, event: EventRecord) -> int:
    """The next id of the run's own sequence (1, 2, ...), as in the Redis store: an id says
    nothing of other runs. Safe without more locking: every write holds the database's lock."""
    row = conn.execute(
        "INSERT INTO run_events (run_id, id, doc) SELECT ?, COALESCE(MAX(id), 0) + 1, ? "
        "FROM run_events WHERE run_id = ? RETURNING id",
        (run_id, event.model_dump_json(exclude_none=True), run_id),
    ).fetchone()
    return int(row[0])


class _Reader:
    """One thread's read connection; its lock keeps :meth:`SqliteStateStore.close` from closing
    it under a statement (uncontended but for close)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.closed = False


class SqliteStateStore(StateStore):
    """State store in one SQLite file (``:memory:`` is not supported: threads need one file)."""

    def __init__(self, path: str | Path, *, retention: float = DEFAULT_RETENTION) -> None:
        self.path = Path(path)
        self.retention = retention
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._readers: list[_Reader] = []
        self._all_lock = threading.Lock()
        self._closed = False
        conn = self._reader().conn
        conn.execute("PRAGMA journal_mode=WAL")
        indexed = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_index'").fetchone()
        retained = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_ended'").fetchone()
        conn.executescript(_SCHEMA)
        if not indexed:
            conn.executescript(f"BEGIN IMMEDIATE; {_INDEX_RUNS} COMMIT;")
        if not retained:
            conn.executescript(f"BEGIN IMMEDIATE; {_INDEX_ENDED} COMMIT;")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone():
            conn.executescript(f"BEGIN IMMEDIATE; {_MIGRATE_EVENTS} COMMIT;")
        if any(col[1] == "spec" for col in conn.execute("PRAGMA table_info(runs)")):
            conn.executescript(f"BEGIN IMMEDIATE; {_MIGRATE_SPECS} COMMIT;")
        # Writers of this process take turns on one connection and share commits (see
        # sqlite_commit.py) rather than queueing in SQLite's busy handler, which sleeps in
        # growing steps and would stall threads that could run at once.
        self._commits = GroupCommit(self._connect)
        self._ends = LocalRunEnds()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=60.0, check_same_thread=False
        )
        # NORMAL is durable across process crashes in WAL mode (only an OS crash can lose
        # the last transactions), which is the failure the embedded runtime must survive.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=60000")
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _reader(self) -> _Reader:
        reader = getattr(self._local, "reader", None)
        if reader is None:
            conn = self._connect()
            with self._all_lock:  # checked where close sets it: no reader is left open
                if self._closed:
                    conn.close()
                    raise StoreError("sqlite: the store is closed")
                reader = self._local.reader = _Reader(conn)
                self._readers.append(reader)
        return reader

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._commits.write()

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        reader = self._reader()
        with reader.lock:
            if reader.closed:
                raise StoreError("sqlite: the store is closed")
            try:
                return reader.conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite: {exc}") from exc

    # -- runs -------------------------------------------------------------------------------
    def create_run(self, run, spec, nodes, instances):
        with self._write() as c:
            if run.idempotency_key is not None:
                row = c.execute(
                    "SELECT doc FROM runs WHERE idem_key = ?", (run.idempotency_key,)
                ).fetchone()
                if row is not None:
                    existing = RunRecord.model_validate_json(row[0])
                    if existing.spec_hash != run.spec_hash:
                        raise IdempotencyConflict(existing.id)
                    return existing, False
            c.execute("INSERT INTO runs VALUES (?, ?, ?)",
                      (run.id, run.idempotency_key, run.model_dump_json()))
            c.execute("INSERT INTO run_specs VALUES (?, ?)", (run.id, spec.model_dump_json()))
            c.execute("INSERT INTO run_index VALUES (?, ?)", (run.created_at, run.id))
            tx = _SqliteTx(c, run.id)
            for node in nodes:
                tx.put_node(node)
            for inst in instances:
                tx.put_instance(inst)
            tx.add_outbox([i.instance_id for i in instances])
            for event in creation_events(run, nodes):
                tx.event(event)
        return run, True

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._read("SELECT doc FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise NotFound(f"no run {run_id!r}")
        return RunRecord.model_validate_json(rows[0][0])

    def run_spec(self, run_id: str) -> RunSpecRecord:
        rows = self._read("SELECT spec FROM run_specs WHERE id = ?", (run_id,))
        if not rows:
            raise NotFound(f"no run {run_id!r}")
        return RunSpecRecord.model_validate_json(rows[0][0])

    def runs_before(self, before: tuple[float, str] | None, limit: int) -> list[RunRecord]:
        at, last = before if before is not None else (float("inf"), "")
        rows = self._read(
            "SELECT r.doc FROM run_index i JOIN runs r ON r.id = i.id "
            "WHERE (i.created_at, i.id) < (?, ?) ORDER BY i.created_at DESC, i.id DESC LIMIT ?",
            (at, last, limit))
        return [RunRecord.model_validate_json(r[0]) for r in rows]

    def nodes(self, run_id: str) -> list[NodeRecord]:
        rows = self._read("SELECT doc FROM nodes WHERE run_id = ?", (run_id,))
        return [NodeRecord.model_validate_json(r[0]) for r in rows]

    def instances(self, run_id: str) -> list[InstanceRecord]:
        rows = self._read(
            "SELECT doc FROM instances WHERE run_id = ? ORDER BY node_id, seq", (run_id,)
        )
        return [InstanceRecord.model_validate_json(r[0]) for r in rows]

    def instance(self, run_id: str, instance_id: str) -> InstanceRecord:
        rows = self._read(
            "SELECT doc FROM instances WHERE run_id = ? AND instance_id = ?", (run_id, instance_id)
        )
        if not rows:
            raise NotFound(f"no instance {instance_id!r} in run {run_id!r}")
        return InstanceRecord.model_validate_json(rows[0][0])

    @contextmanager
    def transaction(self, run_id: str, *, shared: bool = False) -> Iterator[RunTx]:
        with self._write() as c:
            tx = _SqliteTx(c, run_id)
            yield tx
        if tx.ended:  # committed: the write context returns after the COMMIT
            self._ends.announce(run_id)

    # -- hot transitions (see sqlite_steps) --------------------------------------------------
    def start_instances(self, starts: Sequence[Start]) -> list[tuple[Started, float]]:
        """All in one transaction (see :mod:`.sqlite_steps`)."""
        with self._write() as c:
            batch = sqlite_steps.Batch()
            until = time.time() + self.retention
            outcomes = [sqlite_steps.start(c, s, batch, take=_take, reused_until=until)
                        for s in starts]
            batch.flush(c)
            return outcomes

    def finish_instances(self, finishes: Sequence[Finish]) -> list[FinishOutcome]:
        """All in one transaction (see :mod:`.sqlite_steps`)."""
        with self._write() as c:
            batch = sqlite_steps.Batch()
            outs = [sqlite_steps.finish(c, f, batch) for f in finishes]
            batch.flush(c)
        for finish, out in zip(finishes, outs, strict=True):
            if out.run_ended:
                self._ends.announce(finish.done.run_id)
        return outs

    def watch_end(self, run_id: str) -> AbstractContextManager[EndWatch]:
        """Signalled within this process only: a waiter in another one polls."""
        return self._ends.watch(run_id)

    # -- results ----------------------------------------------------------------------------
    def get_result(self, key: str) -> ResultRecord | None:
        rows = self._read("SELECT doc FROM results WHERE key = ?", (key,))
        return ResultRecord.model_validate_json(rows[0][0]) if rows else None

    def get_results(self, keys: Sequence[str]) -> dict[str, ResultRecord]:
        out: dict[str, ResultRecord] = {}
        for lo in range(0, len(keys), READ_BATCH):
            part = keys[lo:lo + READ_BATCH]
            rows = self._read(f"SELECT key, doc FROM results WHERE key IN "
                              f"({','.join('?' * len(part))})", tuple(part))
            out.update((key, ResultRecord.model_validate_json(doc)) for key, doc in rows)
        return out

    def put_result(self, result: ResultRecord) -> ResultRecord:
        with self._write() as c:
            return _put_result(c, result)

    # -- claims -----------------------------------------------------------------------------
    def claim(self, key: str, owner: str, ttl: float) -> bool:
        return self._take("claims", key, owner, ttl)

    def try_lock(self, name: str, owner: str, ttl: float) -> bool:
        return self._take("locks", name, owner, ttl)

    def _take(self, table: str, key: str, owner: str, ttl: float) -> bool:
        with self._write() as c:
            return _take(c, table, key, owner, ttl) == 0.0

    def renew(self, key: str, owner: str, ttl: float) -> bool:
        with self._write() as c:
            cur = c.execute(
                "UPDATE claims SET expires = ? WHERE key = ? AND owner = ?",
                (time.time() + ttl, key, owner),
            )
            return cur.rowcount == 1

    def release(self, key: str, owner: str) -> None:
        with self._write() as c:
            c.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, owner))

    def lease_remaining(self, key: str) -> float:
        rows = self._read("SELECT expires FROM claims WHERE key = ?", (key,))
        return max(0.0, rows[0][0] - time.time()) if rows else 0.0

    # -- outbox -----------------------------------------------------------------------------
    def outbox(self, older_than: float = 0.0, limit: int = 1000) -> list[tuple[str, str]]:
        rows = self._read(
            "SELECT run_id, instance_id FROM outbox WHERE at <= ? ORDER BY at LIMIT ?",
            (time.time() - older_than, limit),
        )
        return [(r[0], r[1]) for r in rows]

    def clear_outbox(self, entries: Sequence[tuple[str, str]]) -> None:
        if not entries:
            return
        with self._write() as c:
            c.executemany("DELETE FROM outbox WHERE run_id = ? AND instance_id = ?", entries)

    def stale_instances(self, older_than: float, limit: int = 1000) -> list[tuple[str, str]]:
        rows = self._read(
            "SELECT run_id, instance_id FROM instances WHERE live = 1 AND touched <= ? "
            "ORDER BY touched LIMIT ?", (time.time() - older_than, limit),
        )
        return [(r[0], r[1]) for r in rows]

    def touch(self, entries: Sequence[tuple[str, str]]) -> None:
        if entries:
            now = time.time()
            with self._write() as c:
                c.executemany(
                    "UPDATE instances SET touched = ? WHERE run_id = ? AND instance_id = ?",
                    [(now, r, i) for r, i in entries],
                )

    def quarantine(self, run_id: str, instance_id: str, reason: str) -> None:
        with self._write() as c:
            c.execute("UPDATE instances SET live = 0 WHERE run_id = ? AND instance_id = ?",
                      (run_id, instance_id))
            c.execute("DELETE FROM outbox WHERE run_id = ? AND instance_id = ?",
                      (run_id, instance_id))
            _append_event(c, run_id, EventRecord(
                type="instance.quarantined", time=time.time(), instance_id=instance_id,
                error=reason))

    # -- events -----------------------------------------------------------------------------
    def append_event(self, run_id: str, event: EventRecord) -> int:
        with self._write() as c:
            return _append_event(c, run_id, event)

    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        rows = self._read(
            "SELECT id, doc FROM run_events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
            (run_id, after, limit),
        )
        return [
            Event(id=r[0], run_id=run_id, **EventRecord.model_validate_json(r[1]).model_dump())
            for r in rows
        ]

    # -- retention (see genloop.workers.stores.retention) ------------------------------------------
    def ended_runs(self, limit: int) -> list[str]:
        return [r[0] for r in self._read("SELECT run_id FROM run_ended LIMIT ?", (limit,))]

    def schedule_expiry(self, run_id: str, expires_at: float | None,
                        result_keys: Sequence[str]) -> None:
        with self._write() as c:
            if expires_at is not None:
                c.execute("INSERT OR REPLACE INTO run_expiry VALUES (?, ?)", (run_id, expires_at))
                c.executemany(
                    "INSERT INTO result_until VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                    "at = max(at, excluded.at)", [(k, expires_at) for k in result_keys])
            else:
                c.execute("DELETE FROM run_expiry WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM run_ended WHERE run_id = ?", (run_id,))

    def expire_runs(self, now: float, limit: int) -> list[str]:
        gone = []
        with self._write() as c:
            due = c.execute("SELECT run_id FROM run_expiry WHERE at <= ? ORDER BY at LIMIT ?",
                            (now, limit)).fetchall()
            for (run_id,) in due:
                c.execute("DELETE FROM run_expiry WHERE run_id = ?", (run_id,))
                # Pinned since it was scheduled, or not ended (a resumed run): it stays.
                row = c.execute("DELETE FROM runs WHERE id = ? AND json_extract(doc, "
                                "'$.finished_at') IS NOT NULL AND id NOT IN (SELECT run_id FROM "
                                "run_pins) RETURNING json_extract(doc, '$.created_at')",
                                (run_id,)).fetchone()
                if row is not None:
                    # The listing's key leads with the time: a delete by id alone would scan it
                    c.execute("DELETE FROM run_index WHERE created_at = ? AND id = ?",
                              (row[0], run_id))
                    for table, column in _RUN_TABLES:
                        c.execute(f"DELETE FROM {table} WHERE {column} = ?", (run_id,))
                    gone.append(run_id)
        return gone

    def due_results(self, now: float, limit: int) -> list[str]:
        return [r[0] for r in self._read(
            "SELECT key FROM result_until WHERE at <= ? ORDER BY at LIMIT ?", (now, limit))]

    def delete_results(self, keys: Sequence[str], now: float) -> int:
        gone = 0
        with self._write() as c:
            for key in keys:
                if c.execute("DELETE FROM result_until WHERE key = ? AND at <= ?",
                             (key, now)).rowcount:
                    gone += c.execute("DELETE FROM results WHERE key = ?", (key,)).rowcount
        return gone

    def reference_docs(self) -> Iterator[str]:
        for sql in ("SELECT doc FROM results", "SELECT spec FROM run_specs"):
            yield from (row[0] for row in self._read(sql))

    def storage(self) -> Storage:
        def count(table: str) -> int:
            return int(self._read(f"SELECT COUNT(*) FROM {table}")[0][0])

        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return Storage(runs=count("run_index"), expiring=count("run_expiry"),
                       pinned=count("run_pins"), results_expiring=count("result_until"),
                       bytes=sum(f.stat().st_size for f in files if f.exists()))

    def pinned_runs(self) -> list[str]:
        return [r[0] for r in self._read("SELECT run_id FROM run_pins")]

    def close(self) -> None:
        """Close every connection once the statement on it (if any) has ended: closing one
        under a running statement crashes the process in SQLite's C code. Any use after this
        raises :class:`StoreError`."""
        self._commits.close()
        with self._all_lock:
            self._closed = True
            readers, self._readers = self._readers, []
            conns, self._all = self._all, []
        for reader in readers:
            with reader.lock:
                reader.closed = True
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
