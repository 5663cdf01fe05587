"""Retention: finished runs, and the results no kept run needs, are removed after a while, so a
store that serves for months stays the size it was after its first retention period.

The rules (one pass, :func:`retention_pass`, run by every sweeper; any number may run at once):
- A finished run is kept ``retention`` seconds after its end (its own ``keep_for`` if set),
  then deleted with its spec, nodes, instances, events, listing entry and idempotency key.
  A pinned run is never deleted; unpinned, it expires by the rules again, counted from its end.
- A result is kept as long as the longest-kept run that referenced it (each run, once ended,
  extends its results to its own expiry), at least ``retention`` after a start last reused it
  (the start that reuses it extends it in the same step, so a run never reuses a result the
  pass is deleting), and while a pinned run references it. A result no ended run referenced
  yet (its run still going) is not a candidate at all.

Costs: each ended run is read once, when its expiry is scheduled (O(its size)); a deletion
costs what it deletes; only the pinned runs are read on every pass that has due results.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .base import DEFAULT_RETENTION, StateStore
from .records import InstanceRecord, NodeRecord

logger = logging.getLogger(__name__)

#: Where a process that builds a store reads its retention (``7d``, ``12h``, ``30m``, seconds).
ENV_RETENTION = "GENLOOP_RETENTION"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

#: Runs or results one batch of a pass handles, per kind; a pass takes batches until one is not
#: full, at most :data:`PASS_BATCHES` of them (a larger backlog waits for the next pass).
PASS_LIMIT = 500
PASS_BATCHES = 20


@dataclass(frozen=True)
class Expired:
    """What one pass did."""

    scheduled: int
    runs: int
    results: int


def duration(text: str) -> float:
    """Seconds in ``7d``, ``12h``, ``30m``, ``45s`` or a plain number of seconds (> 0)."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:], None)
    try:
        seconds = float(text[:-1] if unit else text) * (unit or 1.0)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (say 7d, 12h, 30m, 45s or seconds)") from None
    if seconds <= 0:
        raise ValueError(f"a retention must be longer than 0 s, not {text!r}")
    return seconds


def configured_retention() -> float:
    """The retention ``GENLOOP_RETENTION`` sets, else the default (a week)."""
    text = os.environ.get(ENV_RETENTION)
    return DEFAULT_RETENTION if not text else duration(text)


def referenced_keys(instances: Iterable[InstanceRecord], nodes: Iterable[NodeRecord]) -> set[str]:
    """Every result key a run's records name: what its instances stored or reused, what they
    read, what its nodes output."""
    keys = set()
    for inst in instances:
        if inst.result_key is not None:
            keys.add(inst.result_key)
        keys.update(ref.key for ref in inst.inputs)
    for node in nodes:
        keys.update(ref.key for ref in node.outputs)
    return keys


def retention_pass(store: StateStore, retention: float, *, now: float | None = None,
                   limit: int = PASS_LIMIT) -> Expired:
    """Schedule the expiry of runs that ended, delete the runs and results that are due, in
    batches of ``limit``."""
    now = time.time() if now is None else now
    scheduled = runs = results = 0
    pinned: set[str] | None = None
    for _ in range(PASS_BATCHES):
        ended = store.ended_runs(limit)
        for run_id in ended:
            _schedule(store, run_id, retention)
        expired = store.expire_runs(now, limit)
        due = store.due_results(now, limit)
        if due and pinned is None:
            pinned = set()
            for run_id in store.pinned_runs():
                pinned |= referenced_keys(store.instances(run_id), store.nodes(run_id))
        deleted = store.delete_results([k for k in due if k not in (pinned or ())], now)
        scheduled, runs, results = scheduled + len(ended), runs + len(expired), results + deleted
        if max(len(ended), len(expired), len(due)) < limit:
            break
    if runs or results:
        logger.info("retention: %d run(s) and %d result(s) expired", runs, results)
    return Expired(scheduled=scheduled, runs=runs, results=results)


def _schedule(store: StateStore, run_id: str, retention: float) -> None:
    run = store.get_run(run_id)
    if run.finished_at is None or run.pinned:
        store.schedule_expiry(run_id, None, [])
        return
    expires_at = run.finished_at + (retention if run.keep_for is None else run.keep_for)
    keys = referenced_keys(store.instances(run_id), store.nodes(run_id))
    store.schedule_expiry(run_id, expires_at, sorted(keys))
