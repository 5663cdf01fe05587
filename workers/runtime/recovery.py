"""Recovery: re-send what a fault left behind, from the state the store keeps.

The sweeper middleware (``middleware/sweeper.py``) calls :func:`sweep` on every tick in the one
process holding the sweeper lock; its docstring gives the worst-case recovery time per fault.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import ValidationError

from genloop.sdk.errors import NotFound
from genloop.sdk.models import NodeStatus
from genloop.sdk.validation import bad_values

from ..metrics.prometheus import metrics
from ..stores.records import InstanceRecord
from .scheduler import NODE_MARK, Scheduler

log = logging.getLogger(__name__)


def sweep(scheduler: Scheduler, older_than: float = 10.0, grace: float | None = None) -> int:
    """Re-send what a fault left behind; returns how many messages were sent.

    - Outbox entries older than ``older_than``: a worker committed a completion and died
      before enqueuing the children it released; or, for a node mark (``@node``), before a
      node's transition that a Redis script left to it (completing a node of many instances,
      or expanding a child the script released).
    - With ``grace``, unfinished instances nothing has written for that long (see
      :func:`recover`).

    A record that cannot be read is quarantined and the sweep goes on with the rest: one
    bad record must not stop recovery for every run.
    """
    entries = scheduler.store.outbox(older_than=older_than)
    marks = [(r, i) for r, i in entries if i.startswith(NODE_MARK)]
    entries = [(r, i) for r, i in entries if not i.startswith(NODE_MARK)]
    live = [i for i in _readable(scheduler, entries) if not i.status.terminal]
    scheduler.enqueue(live, 0.0)
    scheduler.store.clear_outbox(entries)
    sent = len(live)
    metrics().sweeper_resends.labels("outbox").inc(sent)
    for run_id, mark in marks:
        try:
            scheduler.finish_node(run_id, mark.removeprefix(NODE_MARK))
        except (NotFound, ValidationError, ValueError) as exc:
            log.error("dropping node mark %s/%s: %s", run_id, mark, exc)
            scheduler.store.clear_outbox([(run_id, mark)])
    if grace is not None:
        sent += recover(scheduler, grace)
    return sent


def recover(scheduler: Scheduler, grace: float, limit: int = 1000) -> int:
    """Re-send the unfinished instances that nobody is working on.

    An instance untouched for ``grace`` seconds is re-sent when
    - it is running and the lease on its result key has ended (its worker died or lost
      Redis): a live holder is never duplicated;
    - it is queued and its queue has no message waiting its turn (the scheduler's
      ``backlog``: in the queue, in the fair queue, and in the embedded runtime also held by
      a worker: prefetched, delayed, or later in a chunk it runs): its message was lost
      (deleted, or stuck in the ack set of a worker that cannot ack it after a Redis
      restart). While a backlog waits, queued instances are only marked seen, so a long
      queue is not flooded with duplicates.
    Re-sent and seen instances are touched, so each is looked at again ``grace`` later.
    Duplicates are harmless: the executor's claim runs the body at most once at a time.
    """
    found = scheduler.store.stale_instances(older_than=grace, limit=limit)
    resend: list[InstanceRecord] = []
    waiting: dict[str, int] = {}
    seen: list[tuple[str, str]] = []
    for inst in _readable(scheduler, found):
        if inst.status == NodeStatus.RUNNING:
            if inst.result_key is not None and scheduler.store.lease_remaining(inst.result_key):
                continue  # a live holder: look again at the next sweep
            # Read again after the lease: a completion stores the result and releases the lease
            # in one step, so one that committed between the two reads shows no lease here.
            if _ended(scheduler, inst):
                continue
        elif scheduler.backlog is not None:
            if inst.queue not in waiting:
                waiting[inst.queue] = scheduler.backlog(inst.queue)
            if waiting[inst.queue] > 0:
                seen.append((inst.run_id, inst.instance_id))
                continue
        resend.append(inst)
    takeovers = sum(i.status == NodeStatus.RUNNING for i in resend)
    metrics().lease_takeovers.inc(takeovers)
    metrics().sweeper_resends.labels("lease_ended").inc(takeovers)
    metrics().sweeper_resends.labels("message_lost").inc(len(resend) - takeovers)
    if resend:
        log.warning("re-sending %d instance(s) with no live lease for %.0fs", len(resend),
                    grace)
        scheduler.resend(resend, 0.0)
    scheduler.store.touch(seen + [(i.run_id, i.instance_id) for i in resend])
    return len(resend)


def _ended(scheduler: Scheduler, inst: InstanceRecord) -> bool:
    """Whether ``inst`` is no longer running (it ended, or the record is gone)."""
    try:
        return scheduler.store.instance(inst.run_id, inst.instance_id).status != inst.status
    except (NotFound, ValidationError):
        return True


def _readable(scheduler: Scheduler,
              entries: Sequence[tuple[str, str]]) -> list[InstanceRecord]:
    """The entries' records; unreadable ones, and ones holding values no spec may hold (the
    admission's own check, :func:`~genloop.sdk.validation.bad_values`), are quarantined (with
    an event) and left out."""
    out = []
    for run_id, instance_id in entries:
        try:
            inst = scheduler.store.instance(run_id, instance_id)
            bad = bad_values(inst.model_dump())
            if bad:
                raise ValueError("; ".join(f"{where}: {why}" for where, why in bad))
            out.append(inst)
        except (NotFound, ValidationError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            log.error("quarantining %s/%s, its record cannot be read: %s", run_id,
                      instance_id, reason)
            scheduler.store.quarantine(run_id, instance_id, reason[:2000])
    return out
