"""The state store seam: runs, nodes, instances, results by key, claims, outbox, events.

Every implementation (SQLite for the embedded runtime, Redis for the worker pool) passes the
same contract suite in ``tests/contract/test_state_store.py``.

Scheduling decisions are made by the scheduler, not the store: the store only promises that a
:meth:`StateStore.transaction` on one run is serializable, so reading a node's counters and
writing them back cannot interleave with another worker doing the same.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager

from genloop.sdk.errors import IdempotencyConflict as IdempotencyConflict  # re-exported
from genloop.sdk.models import Event, NodeStatus

from .records import (
    EventRecord,
    InstanceRecord,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
    Storage,
)
from .run_ends import EndWatch
from .steps import Finish, FinishOutcome, Start, Started

#: Seconds a finished run (and a result no kept run needs) is kept by default: a week, as a
#: pool's operator would look back on a run; a store is given another (``retention=``).
DEFAULT_RETENTION = 7 * 24 * 3600.0

#: Keys per round trip (Redis MGET) or statement (SQLite ``IN``) of a batched read: small
#: enough for SQLite's host-parameter limit and a modest reply.
READ_BATCH = 500


def creation_events(run: RunRecord, nodes: Sequence[NodeRecord]) -> list[EventRecord]:
    """The events :meth:`StateStore.create_run` writes with a new run: ``run.submitted``, and
    ``node.queued`` for each node queued at once (the roots), as every later node's queueing
    writes one: the event log says every node that was queued, and the metrics counted from
    it agree."""
    return [EventRecord(type="run.submitted", time=run.created_at, status="pending"), *(
        EventRecord(type="node.queued", time=run.created_at, node_id=node.node_id,
                    status="queued", message=f"{node.pending_instances} instance(s)")
        for node in nodes if node.status == NodeStatus.QUEUED)]


class RunTx(ABC):
    """Reads and writes of one run inside a serializable transaction."""

    @abstractmethod
    def run(self) -> RunRecord: ...

    @abstractmethod
    def put_run(self, run: RunRecord) -> None: ...

    @abstractmethod
    def pin(self, pinned: bool) -> None:
        """Record the run pinned or not where the store's retention looks for pins."""

    @abstractmethod
    def ended_counts(self) -> dict[str, int]:
        """Each ended node's output count, as :meth:`count_ended` recorded them."""

    @abstractmethod
    def count_ended(self, node_id: str, items: int) -> None:
        """Record that ``node_id`` ended with ``items`` outputs, apart from the run's record:
        that record is rewritten on every completion, so it must not grow with the run."""

    @abstractmethod
    def node(self, node_id: str) -> NodeRecord: ...

    @abstractmethod
    def put_node(self, node: NodeRecord) -> None: ...

    @abstractmethod
    def instance(self, instance_id: str) -> InstanceRecord: ...

    @abstractmethod
    def instances(self, node_id: str) -> list[InstanceRecord]:
        """The node's instances in ``seq`` order."""

    @abstractmethod
    def put_instance(self, instance: InstanceRecord) -> None: ...

    @abstractmethod
    def add_outbox(self, instance_ids: Sequence[str]) -> None:
        """Record instances to enqueue; committed with everything else in the transaction."""

    @abstractmethod
    def event(self, event: EventRecord) -> None: ...

    @abstractmethod
    def release(self, key: str, owner: str) -> None:
        """Drop ``owner``'s lease on ``key`` when this transaction commits."""


class StateStore(ABC):
    """Where runs live. Thread-safe; every method may be called from any worker thread."""

    #: Seconds a finished run is kept (see :mod:`genloop.workers.stores.retention`).
    retention: float = DEFAULT_RETENTION

    # -- runs -------------------------------------------------------------------------------
    @abstractmethod
    def create_run(
        self, run: RunRecord, spec: RunSpecRecord, nodes: Sequence[NodeRecord],
        instances: Sequence[InstanceRecord],
    ) -> tuple[RunRecord, bool]:
        """Store a new run with its nodes and first instances, which go to the outbox, and its
        :func:`creation_events`.

        If ``run.idempotency_key`` was used before with the same ``spec_hash``, nothing is written
        and the existing run comes back with ``False``; with another spec hash,
        :class:`IdempotencyConflict`. Returns ``(run, created)``.
        """

    @abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """``NotFound`` if there is no such run."""

    @abstractmethod
    def run_spec(self, run_id: str) -> RunSpecRecord:
        """What was submitted (``NotFound`` if there is no such run)."""

    @abstractmethod
    def runs_before(self, before: tuple[float, str] | None, limit: int) -> list[RunRecord]:
        """Up to ``limit`` runs newest first, ordered by ``(created_at, id)`` descending and
        strictly before ``before`` (``None``: from the newest): a cursor that pages without
        gaps or repeats while new runs arrive."""

    @abstractmethod
    def nodes(self, run_id: str) -> list[NodeRecord]: ...

    @abstractmethod
    def instances(self, run_id: str) -> list[InstanceRecord]: ...

    @abstractmethod
    def instance(self, run_id: str, instance_id: str) -> InstanceRecord:
        """``NotFound`` if there is no such instance."""

    @abstractmethod
    def transaction(self, run_id: str, *, shared: bool = False) -> AbstractContextManager[RunTx]:
        """A serializable read-modify-write of one run; all writes commit together or not at
        all (an exception inside rolls back). Transactions of a run exclude each other.

        ``shared``: a store's scripted per-instance transitions (Redis) may run alongside. The
        caller promises to write only records those cannot touch at the same time: completing
        a node all of whose instances have ended, and releasing its children."""

    # -- the hot transitions, a chunk's at once (see steps.py) ------------------------------
    @abstractmethod
    def start_instances(self, starts: Sequence[Start]) -> list[tuple[Started, float]]:
        """Claim each start's key for its owner and store its instance running (its node and
        run too, at their first start), each step applied alone, all in one store call.
        Returns each outcome and, when ``LEASED``, the seconds left on the holder's lease; a
        leased instance is also touched (see :meth:`touch`), since its delivery looks again.
        A reused result (``STORED``) is kept at least a retention more."""

    @abstractmethod
    def finish_instances(self, finishes: Sequence[Finish]) -> list[FinishOutcome]:
        """Store each finish's result (unless ``None``, first wins) and instance, drop its
        lease (whatever the outcome) and count its node down, each step applied alone, all in
        one store call; with a ``completion``, also complete a node of one instance when
        nothing could disagree (no run transaction in the way, the run not cancelling, no run
        error to report); otherwise a node that is done gets an outbox mark for the caller, or
        the sweeper, to complete in a run transaction. Children that became ready get marks
        too."""

    # -- results ----------------------------------------------------------------------------
    @abstractmethod
    def get_result(self, key: str) -> ResultRecord | None: ...

    @abstractmethod
    def get_results(self, keys: Sequence[str]) -> dict[str, ResultRecord]:
        """The results stored under ``keys``, by key (keys with none are left out), in a few
        round trips rather than one per key: a reducer over a 10,000-item map reads 10,000."""

    @abstractmethod
    def put_result(self, result: ResultRecord) -> ResultRecord:
        """Store a result; if the key is already stored, keep the first and return it."""

    # -- claims (leases on result keys) -------------------------------------------------------
    @abstractmethod
    def claim(self, key: str, owner: str, ttl: float) -> bool:
        """Take the lease on ``key`` for ``ttl`` seconds if nobody else holds a live one."""

    @abstractmethod
    def renew(self, key: str, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease; ``False`` if it has lost it."""

    @abstractmethod
    def release(self, key: str, owner: str) -> None:
        """Drop ``owner``'s lease, if it still holds it."""

    @abstractmethod
    def lease_remaining(self, key: str) -> float:
        """Seconds left on the live lease on ``key``; 0 when there is none."""

    # -- outbox -----------------------------------------------------------------------------
    @abstractmethod
    def outbox(self, older_than: float = 0.0, limit: int = 1000) -> list[tuple[str, str]]:
        """(run id, instance id) entries written at least ``older_than`` seconds ago."""

    @abstractmethod
    def clear_outbox(self, entries: Sequence[tuple[str, str]]) -> None: ...

    @abstractmethod
    def try_lock(self, name: str, owner: str, ttl: float) -> bool:
        """A named lock (e.g. the sweeper's) held until ``ttl`` runs out or it is released."""

    @abstractmethod
    def stale_instances(self, older_than: float, limit: int = 1000) -> list[tuple[str, str]]:
        """Unfinished instances whose record has not changed for ``older_than`` seconds."""

    @abstractmethod
    def touch(self, entries: Sequence[tuple[str, str]]) -> None:
        """Mark unfinished instances as just seen (after re-sending their message)."""

    @abstractmethod
    def quarantine(self, run_id: str, instance_id: str, reason: str) -> None:
        """Take an instance whose record cannot be read out of the outbox and the unfinished
        set, so that the sweeper stops tripping over it, and say so in the run's events. The
        record itself is kept for an operator to inspect."""

    # -- events -----------------------------------------------------------------------------
    @abstractmethod
    def append_event(self, run_id: str, event: EventRecord) -> int:
        """Append outside any transaction (progress); returns the event id."""

    @abstractmethod
    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        """Events of the run with id greater than ``after``, oldest first."""

    # -- retention (the pass and the rules: genloop.workers.stores.retention) ----------------------
    @abstractmethod
    def ended_runs(self, limit: int) -> list[str]:
        """Runs that ended (or were pinned or unpinned since) and have no expiry scheduled."""

    @abstractmethod
    def schedule_expiry(self, run_id: str, expires_at: float | None,
                        result_keys: Sequence[str]) -> None:
        """Take the run off :meth:`ended_runs`: it expires at ``expires_at`` (``None``: never,
        it is pinned), and each of ``result_keys`` is kept at least as long."""

    @abstractmethod
    def expire_runs(self, now: float, limit: int) -> list[str]:
        """Delete runs whose expiry is due (record, spec, nodes, instances, events, listing
        and idempotency key) and return their ids; a run pinned or not ended meanwhile stays."""

    @abstractmethod
    def due_results(self, now: float, limit: int) -> list[str]:
        """Keys of results kept until ``now`` or earlier, oldest first."""

    @abstractmethod
    def delete_results(self, keys: Sequence[str], now: float) -> int:
        """Delete these results unless reused since :meth:`due_results` listed them (a start
        that reuses a result keeps it ``retention`` more, in the same step); returns how many
        went."""

    @abstractmethod
    def reference_docs(self) -> Iterator[str]:
        """Every stored result and run spec, as its JSON text: what the artifact collector
        (``genloop.workers.artifacts.gc``) searches for the artifact keys still in use."""

    @abstractmethod
    def storage(self) -> Storage:
        """Counts and bytes of what the store holds now (cheap: counted by indexes)."""

    @abstractmethod
    def pinned_runs(self) -> list[str]:
        """Ids of the pinned runs."""

    def pin(self, run_id: str, pinned: bool) -> RunRecord:
        """Pin (kept whatever the retention, with every result it references) or unpin a
        run; an unpinned finished run expires by the rules again, from its end."""
        with self.transaction(run_id) as tx:
            run = tx.run()
            run.pinned = pinned
            tx.put_run(run)  # a finished run goes back to the pass, which schedules it anew
            tx.pin(pinned)
        return run

    @abstractmethod
    def watch_end(self, run_id: str) -> AbstractContextManager[EndWatch]:
        """A watch on the run's end, to take *before* reading its status (see ``run_ends``):
        its ``wait`` returns early once the run may have ended."""

    def close(self) -> None:
        """Release connections."""
