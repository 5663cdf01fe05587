"""The hot transitions of a node instance on SQLite: the Redis scripts' steps
(``scripts/start.lua``, ``finish.lua``: the same outcomes, ``steps.py``), as a few statements in one
write transaction.

The generic path reads the instance, its node and the run, parses each into its pydantic model,
and writes each back whole, then (when a node of one instance ends) reads the node's instances
again: about 17 statements and 7 model parses and dumps per instance. Here a record is read only
for the fields a decision needs, and written with SQLite's JSON functions (``json_set`` keeps
every other field's text as it was), so a no-op node costs about half the statements and none
of the parsing. Every write happens inside the caller's ``BEGIN IMMEDIATE`` transaction, so no
other writer interleaves: the scripts' ``busy`` outcomes never arise. The steps of one
transaction (a chunk's) share a :class:`Batch`, which reads a run's row and next event id once
for all of them.

A live instance is one whose ``live`` column is 1: not ended (and not quarantined). Statuses go
to SQLite as the ``StrEnum`` members they are (SQLite binds them as their text; ``.value`` is
a slow property, and these steps run per instance).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from genloop.sdk.errors import StoreError
from genloop.sdk.models import NodeStatus, RunStatus

from .records import EventRecord, InstanceRecord
from .steps import Finish, Finished, FinishOutcome, Start, Started

Take = Callable[[sqlite3.Connection, str, str, str, float], float]

_ENDED = tuple(s for s in NodeStatus if s.terminal)
_NOT_ENDED = f"json_extract(doc, '$.status') NOT IN ({', '.join('?' * len(_ENDED))})"


@dataclass
class _Run:
    """A run's row as a batch's steps read it once and count it down."""

    cancelling: bool
    left: int  # pending_nodes
    error: str | None
    counts_ended: bool  # the run keeps its ended nodes' output counts
    counted: bool = False  # ``left`` changed and not written yet
    ended_counts: dict[str, int] = field(default_factory=dict)  # not written yet


@dataclass
class Batch:
    """What the steps of one write transaction (a chunk's starts or finishes) learn once and
    reuse. The transaction holds the database's write lock, so nobody else writes meanwhile: a
    run's next event id is read at its first event and counted from there, its row is read at
    its first step and counted down in memory, and the events and counts are written at once
    by :meth:`flush`, which must run before the transaction commits."""

    _next_event: dict[str, int] = field(default_factory=dict)
    _events: list[tuple[str, int, str]] = field(default_factory=list)
    _runs: dict[str, _Run | None] = field(default_factory=dict)
    _running: set[str] = field(default_factory=set)

    def event(self, c: sqlite3.Connection, run_id: str, event: EventRecord) -> None:
        """Append ``event`` to the run's events (written by :meth:`flush`, all in one call)."""
        next_id = self._next_event.get(run_id)
        if next_id is None:
            next_id = c.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM run_events "
                                "WHERE run_id = ?", (run_id,)).fetchone()[0]
        self._events.append((run_id, next_id, event.model_dump_json(exclude_none=True)))
        self._next_event[run_id] = next_id + 1

    def run(self, c: sqlite3.Connection, run_id: str) -> _Run | None:
        """The run's row as this batch has it; ``None`` if there is no such run."""
        if run_id not in self._runs:
            row = c.execute(
                "SELECT json_extract(doc, '$.cancel_requested'), "
                "json_extract(doc, '$.pending_nodes'), json_extract(doc, '$.error'), "
                "json_extract(doc, '$.counts_ended') FROM runs WHERE id = ?", (run_id,)).fetchone()
            self._runs[run_id] = None if row is None else _Run(bool(row[0]), row[1], row[2],
                                                               bool(row[3]))
        return self._runs[run_id]

    def run_started(self, c: sqlite3.Connection, run_id: str, event: EventRecord) -> None:
        """An instance of the run started: a pending run is now running, with ``event``."""
        if run_id in self._running:
            return
        if c.execute("UPDATE runs SET doc = json_set(doc, '$.status', ?) WHERE id = ? AND "
                     "json_extract(doc, '$.status') = ?",
                     (RunStatus.RUNNING, run_id, RunStatus.PENDING)).rowcount:
            self.event(c, run_id, event)
        self._running.add(run_id)

    def flush(self, c: sqlite3.Connection) -> None:
        """Write what the steps appended and counted: their events, each run's nodes left (a
        run whose every completion so far was cached may still be pending: now it runs) and
        its nodes' output counts."""
        c.executemany("INSERT INTO run_events (run_id, id, doc) VALUES (?, ?, ?)", self._events)
        self._events = []
        for run_id, run in self._runs.items():
            if run is None:
                continue
            if run.counted:
                c.execute("UPDATE runs SET doc = json_set(doc, '$.pending_nodes', ?, "
                          "'$.status', CASE json_extract(doc, '$.status') WHEN ? THEN ? "
                          "ELSE json_extract(doc, '$.status') END) WHERE id = ?",
                          (run.left, RunStatus.PENDING, RunStatus.RUNNING, run_id))
            if run.ended_counts:
                c.executemany("INSERT OR REPLACE INTO ended_counts VALUES (?, ?, ?)",
                              [(run_id, node, items) for node, items in run.ended_counts.items()])
            run.counted, run.ended_counts = False, {}


def _update_instance(c: sqlite3.Connection, inst: InstanceRecord) -> None:
    """Rewrite a stored instance in place (an UPDATE, not the generic path's REPLACE, which
    deletes and re-inserts the row and both of its index entries)."""
    c.execute("UPDATE instances SET doc = ?, live = ?, touched = ? WHERE run_id = ? AND "
              "instance_id = ?", (inst.model_dump_json(), 0 if inst.status.terminal else 1,
                                  time.time(), inst.run_id, inst.instance_id))


def start(c: sqlite3.Connection, step: Start, batch: Batch, *, take: Take,
          reused_until: float) -> tuple[Started, float]:
    """START: claim the step's key for its owner and store its instance, node and run
    running. A stored result is reused, and kept at least until ``reused_until``."""
    running, key = step.running, step.key
    run_id = running.run_id
    if c.execute("SELECT 1 FROM results WHERE key = ?", (key,)).fetchone():
        c.execute("UPDATE result_until SET at = max(at, ?) WHERE key = ?", (reused_until, key))
        return Started.STORED, 0.0
    row = c.execute("SELECT live FROM instances WHERE run_id = ? AND instance_id = ?",
                    (run_id, running.instance_id)).fetchone()
    if row is None:
        return Started.MISSING, 0.0
    if not row[0]:
        return Started.ENDED, 0.0
    run = batch.run(c, run_id)
    if run is None:
        return Started.MISSING, 0.0
    if run.cancelling:
        return Started.CANCELLING, 0.0
    lease = take(c, "claims", key, step.owner, step.ttl)
    if lease:  # the delivery will look again: touched, it is not taken for lost meanwhile
        c.execute("UPDATE instances SET touched = ? WHERE run_id = ? AND instance_id = ?",
                  (time.time(), run_id, running.instance_id))
        return Started.LEASED, lease
    _update_instance(c, running)
    batch.event(c, run_id, step.started)
    c.execute("UPDATE nodes SET doc = json_set(doc, '$.status', ?) WHERE run_id = ? AND "
              "node_id = ? AND json_extract(doc, '$.status') <> ?",
              (NodeStatus.RUNNING, run_id, running.node_id, NodeStatus.RUNNING))
    batch.run_started(c, run_id, step.run_running)
    return Started.STARTED, 0.0


def finish(c: sqlite3.Connection, step: Finish, batch: Batch) -> FinishOutcome:
    """FINISH: store the step's result (first wins) and instance, drop its lease, count the
    node down; complete a node of one instance as the script does (nothing here waits on a
    lock: the caller's transaction holds the database's)."""
    done, result, lease, completion = step.done, step.result, step.lease, step.completion
    run_id, node_id = done.run_id, done.node_id
    if lease is not None:
        c.execute("DELETE FROM claims WHERE key = ? AND owner = ?", lease)
    row = c.execute("SELECT live FROM instances WHERE run_id = ? AND instance_id = ?",
                    (run_id, done.instance_id)).fetchone()
    if row is None:
        return FinishOutcome(Finished.MISSING)
    if not row[0]:
        return FinishOutcome(Finished.ENDED)
    if result is not None and not c.execute(
            "INSERT OR IGNORE INTO results VALUES (?, ?)",
            (result.key, result.model_dump_json())).rowcount:
        return FinishOutcome(Finished.OTHER_RESULT)
    _update_instance(c, done)
    batch.event(c, run_id, step.event)
    pending, outputs = c.execute(
        "UPDATE nodes SET doc = json_set(doc, '$.pending_instances', "
        "json_extract(doc, '$.pending_instances') - 1) WHERE run_id = ? AND node_id = ? "
        "RETURNING json_extract(doc, '$.pending_instances'), "
        "json_array_length(doc, '$.outputs')", (run_id, node_id)).fetchone()
    if pending > 0:
        return FinishOutcome(Finished.COUNTED, pending)
    now = time.time()

    def mark(nid: str) -> None:
        c.execute("INSERT OR REPLACE INTO outbox VALUES (?, ?, ?)", (run_id, "@" + nid, now))

    if completion is None or outputs or c.execute(
            "SELECT COUNT(*) FROM instances WHERE run_id = ? AND node_id = ?",
            (run_id, node_id)).fetchone()[0] != 1:
        mark(node_id)
        return FinishOutcome(Finished.COUNTED, pending)
    run = batch.run(c, run_id)
    if run is None:  # rows of a run are deleted together: a live instance has its run
        raise StoreError(f"run {run_id!r} has a live instance {done.instance_id!r} but no row")
    left = run.left - 1
    if run.cancelling or (left <= 0 and run.error is not None):
        mark(node_id)
        return FinishOutcome(Finished.COUNTED, pending)
    ready = []
    for child in completion.children:
        waiting = c.execute(
            "UPDATE nodes SET doc = json_set(doc, '$.waiting', json_extract(doc, '$.waiting') "
            f"- 1) WHERE run_id = ? AND node_id = ? AND {_NOT_ENDED} "
            "RETURNING json_extract(doc, '$.waiting')", (run_id, child, *_ENDED)).fetchone()
        if waiting is not None and waiting[0] <= 0:
            ready.append(child)
            mark(child)
    c.execute("UPDATE nodes SET doc = json_set(doc, '$.status', ?, '$.outputs', json(?)) "
              "WHERE run_id = ? AND node_id = ?",
              (NodeStatus.SUCCEEDED, completion.outputs_json, run_id, node_id))
    run.left, run.counted = left, True
    if run.counts_ended:
        run.ended_counts[node_id] = completion.output_count
    batch.event(c, run_id, completion.node_event)
    if left <= 0:
        c.execute("UPDATE runs SET doc = json_set(doc, '$.status', ?, '$.finished_at', ?) "
                  "WHERE id = ?", (RunStatus.SUCCEEDED, now, run_id))
        c.execute("INSERT OR IGNORE INTO run_ended VALUES (?)", (run_id,))
        batch.event(c, run_id, completion.run_event)
    return FinishOutcome(Finished.COMPLETED, run_ended=left <= 0, ready=ready)
