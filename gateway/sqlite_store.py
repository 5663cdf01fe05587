"""The gateway store in SQLite, a file next to the embedded home (``HOME/gateway.db``)."""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from genloop.sdk.errors import StoreError

from .limits import TenantLimits
from .store import GatewayStore, KeyInfo, RunSummary, WebhookJob

_SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    hash TEXT PRIMARY KEY, id TEXT NOT NULL, tenant TEXT NOT NULL,
    created_at REAL NOT NULL, revoked_at REAL
);
CREATE INDEX IF NOT EXISTS keys_id ON keys (id);
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, limits TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at REAL NOT NULL, idem TEXT,
    ended INTEGER NOT NULL DEFAULT 0, indexed INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0, summary TEXT
);
CREATE INDEX IF NOT EXISTS runs_open ON runs (tenant, ended);
CREATE INDEX IF NOT EXISTS runs_idem ON runs (idem);
CREATE TABLE IF NOT EXISTS artifacts (
    tenant TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_artifacts (
    run_id TEXT NOT NULL, tenant TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_artifacts_key ON run_artifacts (tenant, key);
CREATE TABLE IF NOT EXISTS uploads (
    tenant TEXT NOT NULL, key TEXT NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hits (
    tenant TEXT NOT NULL, what TEXT NOT NULL, window REAL NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (tenant, what)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS webhooks (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL, next_at REAL, doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS webhooks_due ON webhooks (next_at);
CREATE INDEX IF NOT EXISTS webhooks_of ON webhooks (run_id);
CREATE TABLE IF NOT EXISTS webhook_secrets (tenant TEXT PRIMARY KEY, secret TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    hash TEXT PRIMARY KEY, key_hash TEXT NOT NULL, expires_at REAL NOT NULL
) WITHOUT ROWID;
"""


class SqliteGatewayStore(GatewayStore):
    """One connection behind a lock: the gateway's queries are single-row and fast."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: consistent after a crash
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
            if "cost" not in columns:  # a gateway.db from before costs were recorded
                self._db.execute("ALTER TABLE runs ADD COLUMN cost REAL NOT NULL DEFAULT 0")
            if "summary" not in columns:  # from before the runs list kept summaries
                self._db.execute("ALTER TABLE runs ADD COLUMN summary TEXT")
            if "forget_at" not in columns:  # from before the gateway forgot expired runs
                self._db.execute("ALTER TABLE runs ADD COLUMN forget_at REAL")
            self._db.execute("CREATE INDEX IF NOT EXISTS runs_forget ON runs (forget_at)")
        except sqlite3.Error as exc:
            raise StoreError(f"opening gateway store {self.path}: {exc}") from exc
        self._lock = threading.Lock()

    @contextmanager
    def _sql(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise StoreError(f"gateway store {self.path}: {exc}") from exc

    def _put_key(self, key_hash: str, info: KeyInfo) -> None:
        with self._sql() as db:
            db.execute("INSERT INTO keys VALUES (?, ?, ?, ?, NULL)",
                       (key_hash, info.id, info.tenant, info.created_at))

    def _revoke(self, key_hash: str | None, key_id: str | None) -> KeyInfo | None:
        where, arg = ("hash", key_hash) if key_hash else ("id", key_id)
        with self._sql() as db:
            db.execute(f"UPDATE keys SET revoked_at = ? WHERE {where} = ? AND revoked_at IS NULL",
                       (time.time(), arg))
            row = db.execute(f"SELECT id, tenant, created_at, revoked_at FROM keys "
                             f"WHERE {where} = ?", (arg,)).fetchone()
        return None if row is None else KeyInfo(
            id=row[0], tenant=row[1], created_at=row[2], revoked_at=row[3])

    def keys(self) -> list[KeyInfo]:
        with self._sql() as db:
            rows = db.execute("SELECT id, tenant, created_at, revoked_at FROM keys "
                              "ORDER BY created_at").fetchall()
        return [KeyInfo(id=r[0], tenant=r[1], created_at=r[2], revoked_at=r[3]) for r in rows]

    def _tenant_of_hash(self, key_hash: str) -> str | None:
        with self._sql() as db:
            row = db.execute("SELECT tenant FROM keys WHERE hash = ? AND revoked_at IS NULL",
                             (key_hash,)).fetchone()
        return None if row is None else str(row[0])

    def _put_session(self, session_hash: str, key_hash: str, expires_at: float) -> None:
        with self._sql() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", (time.time(),))
            db.execute("INSERT INTO sessions VALUES (?, ?, ?)",
                       (session_hash, key_hash, expires_at))

    def _session_key(self, session_hash: str) -> str | None:
        with self._sql() as db:
            row = db.execute("SELECT key_hash FROM sessions WHERE hash = ? AND expires_at > ?",
                             (session_hash, time.time())).fetchone()
        return None if row is None else str(row[0])

    def _drop_session(self, session_hash: str) -> None:
        with self._sql() as db:
            db.execute("DELETE FROM sessions WHERE hash = ?", (session_hash,))

    def set_limits(self, tenant: str, limits: TenantLimits) -> None:
        with self._sql() as db:
            db.execute("INSERT OR REPLACE INTO tenants VALUES (?, ?)",
                       (tenant, limits.model_dump_json()))

    def limits(self, tenant: str) -> TenantLimits | None:
        with self._sql() as db:
            row = db.execute("SELECT limits FROM tenants WHERE name = ?", (tenant,)).fetchone()
        return None if row is None else TenantLimits.model_validate_json(row[0])

    def add_run(self, run_id: str, tenant: str, idempotency_key: str | None = None,
                cost: float = 0.0, created_at: float | None = None) -> bool:
        with self._sql() as db:
            cur = db.execute("INSERT OR IGNORE INTO runs (run_id, tenant, created_at, idem, cost) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (run_id, tenant, created_at or time.time(), idempotency_key,
                              cost))
        return cur.rowcount == 1

    def run_cost(self, run_id: str) -> float:
        with self._sql() as db:
            row = db.execute("SELECT cost FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return 0.0 if row is None else float(row[0])

    def run_for_key(self, idempotency_key: str) -> str | None:
        with self._sql() as db:
            row = db.execute("SELECT run_id FROM runs WHERE idem = ?",
                             (idempotency_key,)).fetchone()
        return None if row is None else str(row[0])

    def owner(self, run_id: str) -> str | None:
        with self._sql() as db:
            row = db.execute("SELECT tenant FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else str(row[0])

    def runs(self, tenant: str, before: float | None = None, limit: int = 50,
             before_id: str | None = None) -> list[tuple[str, float]]:
        at = float("inf") if before is None else before
        with self._sql() as db:
            if before_id is None:
                rows = db.execute("SELECT run_id, created_at FROM runs WHERE tenant = ? AND "
                                  "created_at < ? ORDER BY created_at DESC, run_id DESC LIMIT ?",
                                  (tenant, at, limit))
            else:
                rows = db.execute("SELECT run_id, created_at FROM runs WHERE tenant = ? AND "
                                  "(created_at, run_id) < (?, ?) "
                                  "ORDER BY created_at DESC, run_id DESC LIMIT ?",
                                  (tenant, at, before_id, limit))
            return [(r[0], r[1]) for r in rows.fetchall()]

    def _run_ids(self, tenant: str, flag: str) -> list[str]:
        with self._sql() as db:
            rows = db.execute(f"SELECT run_id FROM runs WHERE tenant = ? AND {flag} = 0 "
                              "ORDER BY created_at", (tenant,)).fetchall()
        return [r[0] for r in rows]

    def stored_runs(self, tenant: str) -> int:
        with self._sql() as db:
            return int(db.execute("SELECT COUNT(*) FROM runs WHERE tenant = ?",
                                  (tenant,)).fetchone()[0])

    def open_runs(self, tenant: str) -> list[str]:
        return self._run_ids(tenant, "ended")

    def unindexed_runs(self, tenant: str) -> list[str]:
        return self._run_ids(tenant, "indexed")

    def mark_ended(self, run_id: str) -> None:
        with self._sql() as db:
            db.execute("UPDATE runs SET ended = 1 WHERE run_id = ?", (run_id,))

    def mark_indexed(self, run_id: str, summary: RunSummary) -> None:
        with self._sql() as db:
            db.execute("UPDATE runs SET indexed = 1, summary = ? WHERE run_id = ?",
                       (summary.model_dump_json(), run_id))

    def summary(self, run_id: str) -> RunSummary | None:
        with self._sql() as db:
            row = db.execute("SELECT summary FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None or row[0] is None else RunSummary.model_validate_json(row[0])

    def forget_at(self, run_id: str, at: float) -> None:
        with self._sql() as db:
            db.execute("UPDATE runs SET forget_at = ? WHERE run_id = ?", (at, run_id))

    def due_forgets(self, now: float, limit: int = 100) -> list[str]:
        with self._sql() as db:
            rows = db.execute("SELECT run_id FROM runs WHERE forget_at <= ? ORDER BY forget_at "
                              "LIMIT ?", (now, limit)).fetchall()
        return [r[0] for r in rows]

    def forget_run(self, run_id: str) -> None:
        with self._sql() as db:
            db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM webhooks WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM run_artifacts WHERE run_id = ?", (run_id,))

    def add_artifacts(self, tenant: str, keys: Iterable[str], run_id: str) -> None:
        rows = [(run_id, tenant, k) for k in keys]
        if rows:
            with self._sql() as db:
                db.executemany("INSERT OR IGNORE INTO run_artifacts VALUES (?, ?, ?)", rows)

    def has_artifact(self, tenant: str, key: str) -> bool:
        """Uploads and, from before runs' artifacts were kept per run, every indexed one are in
        ``artifacts``; a run's are in ``run_artifacts`` until the run is forgotten."""
        with self._sql() as db:
            row = db.execute(
                "SELECT 1 FROM run_artifacts WHERE tenant = ? AND key = ? UNION ALL "
                "SELECT 1 FROM artifacts WHERE tenant = ? AND key = ? LIMIT 1",
                (tenant, key, tenant, key)).fetchone()
        return row is not None

    def add_upload(self, tenant: str, key: str, size: int) -> None:
        with self._sql() as db:
            db.execute("INSERT OR IGNORE INTO uploads VALUES (?, ?, ?)", (tenant, key, size))
            db.execute("INSERT OR IGNORE INTO artifacts VALUES (?, ?)", (tenant, key))

    def upload_usage(self, tenant: str) -> tuple[int, int]:
        with self._sql() as db:
            row = db.execute("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM uploads "
                             "WHERE tenant = ?", (tenant,)).fetchone()
        return int(row[0]), int(row[1])

    def hit(self, tenant: str, what: str, window: float) -> tuple[int, float]:
        now = time.time()
        start = math.floor(now / window) * window
        with self._sql() as db:
            (n,) = db.execute(
                "INSERT INTO hits VALUES (?, ?, ?, 1) ON CONFLICT (tenant, what) DO UPDATE SET "
                "n = CASE WHEN window = excluded.window THEN n + 1 ELSE 1 END, "
                "window = excluded.window RETURNING n", (tenant, what, start)).fetchone()
        return int(n), start + window - now

    def put_webhook(self, job: WebhookJob) -> None:
        due = job.next_at if job.state == "pending" else None
        with self._sql() as db:
            db.execute("INSERT OR REPLACE INTO webhooks VALUES (?, ?, ?, ?)",
                       (job.webhook_id, job.run_id, due, job.model_dump_json()))

    def webhook(self, webhook_id: str) -> WebhookJob | None:
        with self._sql() as db:
            row = db.execute("SELECT doc FROM webhooks WHERE id = ?", (webhook_id,)).fetchone()
        return None if row is None else WebhookJob.model_validate_json(row[0])

    def due_webhooks(self, now: float, limit: int = 100) -> list[WebhookJob]:
        with self._sql() as db:
            rows = db.execute("SELECT doc FROM webhooks WHERE next_at <= ? ORDER BY next_at "
                              "LIMIT ?", (now, limit)).fetchall()
        return [WebhookJob.model_validate_json(r[0]) for r in rows]

    def set_webhook_secret(self, tenant: str, secret: str) -> None:
        with self._sql() as db:
            db.execute("INSERT OR REPLACE INTO webhook_secrets VALUES (?, ?)", (tenant, secret))

    def webhook_secret(self, tenant: str) -> str | None:
        with self._sql() as db:
            row = db.execute("SELECT secret FROM webhook_secrets WHERE tenant = ?",
                             (tenant,)).fetchone()
        return None if row is None else str(row[0])

    def ping(self) -> None:
        with self._sql() as db:
            db.execute("SELECT 1").fetchone()

    def close(self) -> None:
        with self._lock:
            self._db.close()
