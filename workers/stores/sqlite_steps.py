"""The hot transitions of a node instance on SQLite: the Redis scripts' steps
(``redis_scripts.py``: START and FINISH, with the same outcomes), as a few statements in one
write transaction.

The generic path reads the instance, its node and the run, parses each into its pydantic model,
and writes each back whole, then (when a node of one instance ends) reads the node's instances
again: about 17 statements and 7 model parses and dumps per instance. Here a record is read only
for the fields a decision needs, and written with SQLite's JSON functions (``json_set`` keeps
every other field's text as it was), so a no-op node costs about half the statements and none
of the parsing. Every write happens inside the caller's ``BEGIN IMMEDIATE`` transaction, so no
other writer interleaves: the scripts' ``busy`` outcomes never arise.

A live instance is one whose ``live`` column is 1: not ended (and not quarantined).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from genloop.sdk.models import NodeStatus, RunStatus

from .records import EventRecord, InstanceRecord, ResultRecord
from .redis_scripts import FinishOutcome, ScriptedCompletion

AppendEvent = Callable[[sqlite3.Connection, str, EventRecord], int]
Take = Callable[[sqlite3.Connection, str, str, str, float], float]

_ENDED = tuple(s.value for s in NodeStatus if s.terminal)
_NOT_ENDED = f"json_extract(doc, '$.status') NOT IN ({', '.join('?' * len(_ENDED))})"


def _update_instance(c: sqlite3.Connection, inst: InstanceRecord) -> None:
    """Rewrite a stored instance in place (an UPDATE, not the generic path's REPLACE, which
    deletes and re-inserts the row and both of its index entries)."""
    c.execute("UPDATE instances SET doc = ?, live = ?, touched = ? WHERE run_id = ? AND "
              "instance_id = ?", (inst.model_dump_json(), 0 if inst.status.terminal else 1,
                                  time.time(), inst.run_id, inst.instance_id))


def start(c: sqlite3.Connection, running: InstanceRecord, key: str, owner: str, ttl: float,
          started: EventRecord, run_running: EventRecord, *, append_event: AppendEvent,
          take: Take) -> tuple[str, float]:
    """START: claim ``key`` for ``owner`` and store ``running``, its node and run running."""
    run_id = running.run_id
    if c.execute("SELECT 1 FROM results WHERE key = ?", (key,)).fetchone():
        return "stored", 0.0
    row = c.execute("SELECT live FROM instances WHERE run_id = ? AND instance_id = ?",
                    (run_id, running.instance_id)).fetchone()
    if row is None:
        return "missing", 0.0
    if not row[0]:
        return "ended", 0.0
    run = c.execute("SELECT json_extract(doc, '$.cancel_requested') FROM runs WHERE id = ?",
                    (run_id,)).fetchone()
    if run is None:
        return "missing", 0.0
    if run[0]:
        return "cancelling", 0.0
    lease = take(c, "claims", key, owner, ttl)
    if lease:  # the delivery will look again: touched, it is not taken for lost meanwhile
        c.execute("UPDATE instances SET touched = ? WHERE run_id = ? AND instance_id = ?",
                  (time.time(), run_id, running.instance_id))
        return "leased", lease
    _update_instance(c, running)
    append_event(c, run_id, started)
    c.execute("UPDATE nodes SET doc = json_set(doc, '$.status', ?) WHERE run_id = ? AND "
              "node_id = ? AND json_extract(doc, '$.status') <> ?",
              (NodeStatus.RUNNING.value, run_id, running.node_id, NodeStatus.RUNNING.value))
    if c.execute("UPDATE runs SET doc = json_set(doc, '$.status', ?) WHERE id = ? AND "
                 "json_extract(doc, '$.status') = ?",
                 (RunStatus.RUNNING.value, run_id, RunStatus.PENDING.value)).rowcount:
        append_event(c, run_id, run_running)
    return "started", 0.0


def finish(c: sqlite3.Connection, done: InstanceRecord, event: EventRecord,
           result: ResultRecord | None, lease: tuple[str, str] | None,
           completion: ScriptedCompletion | None, *, append_event: AppendEvent) -> FinishOutcome:
    """FINISH: store ``result`` (first wins) and ``done``, drop the lease, count the node down;
    complete a node of one instance as the script does. Codes as ``redis_scripts.FINISH``'s
    (never -2: nothing here waits on a lock)."""
    run_id, node_id = done.run_id, done.node_id
    if lease is not None:
        c.execute("DELETE FROM claims WHERE key = ? AND owner = ?", lease)
    row = c.execute("SELECT live FROM instances WHERE run_id = ? AND instance_id = ?",
                    (run_id, done.instance_id)).fetchone()
    if row is None:
        return FinishOutcome(-3)
    if not row[0]:
        return FinishOutcome(-1)
    if result is not None and not c.execute(
            "INSERT OR IGNORE INTO results VALUES (?, ?)",
            (result.key, result.model_dump_json())).rowcount:
        return FinishOutcome(-4)
    _update_instance(c, done)
    append_event(c, run_id, event)
    pending, outputs = c.execute(
        "UPDATE nodes SET doc = json_set(doc, '$.pending_instances', "
        "json_extract(doc, '$.pending_instances') - 1) WHERE run_id = ? AND node_id = ? "
        "RETURNING json_extract(doc, '$.pending_instances'), "
        "json_array_length(doc, '$.outputs')", (run_id, node_id)).fetchone()
    if pending > 0:
        return FinishOutcome(pending)
    now = time.time()

    def mark(nid: str) -> None:
        c.execute("INSERT OR REPLACE INTO outbox VALUES (?, ?, ?)", (run_id, "@" + nid, now))

    if completion is None or outputs or c.execute(
            "SELECT COUNT(*) FROM instances WHERE run_id = ? AND node_id = ?",
            (run_id, node_id)).fetchone()[0] != 1:
        mark(node_id)
        return FinishOutcome(pending)
    cancelling, left, error = c.execute(
        "SELECT json_extract(doc, '$.cancel_requested'), json_extract(doc, '$.pending_nodes'), "
        "json_extract(doc, '$.error') FROM runs WHERE id = ?", (run_id,)).fetchone()
    left -= 1
    if cancelling or (left <= 0 and error is not None):
        mark(node_id)
        return FinishOutcome(pending)
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
              (NodeStatus.SUCCEEDED.value, completion.outputs_json, run_id, node_id))
    # A run stored before ended_items was kept has it null: its limits check reads the nodes.
    c.execute("UPDATE runs SET doc = json_set(doc, '$.ended_items', json_patch("
              "json_extract(doc, '$.ended_items'), json_object(?, ?))) "
              "WHERE id = ? AND json_type(doc, '$.ended_items') = 'object'",
              (node_id, completion.output_count, run_id))
    append_event(c, run_id, completion.node_event)
    if left <= 0:
        c.execute("UPDATE runs SET doc = json_set(doc, '$.pending_nodes', ?, '$.status', ?, "
                  "'$.finished_at', ?) WHERE id = ?",
                  (left, RunStatus.SUCCEEDED.value, now, run_id))
        append_event(c, run_id, completion.run_event)
    else:
        # A run whose every completion so far was cached may still be pending.
        c.execute("UPDATE runs SET doc = json_set(doc, '$.pending_nodes', ?, '$.status', "
                  "CASE json_extract(doc, '$.status') WHEN ? THEN ? "
                  "ELSE json_extract(doc, '$.status') END) WHERE id = ?",
                  (left, RunStatus.PENDING.value, RunStatus.RUNNING.value, run_id))
    return FinishOutcome(-5, run_ended=left <= 0, ready=ready)
