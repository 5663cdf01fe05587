"""The scheduler: submit, start, complete, retry, cancel, resume, sweep.

Every state change of a run is atomic in the store, so two workers finishing the last two
parents of a child at the same instant cannot both release it: the second sees the first's
write. Starting and completing an instance is one step (a Redis script, or its SQLite twin in
``stores/sqlite_steps.py``); a node of one instance completes in that step too. When a step
ends the last of a node's several instances, the node's completion (collect its outputs,
release its children) follows in one run transaction, which the sweeper finishes from an
outbox mark if the worker dies in between. Children that become ready are written to the
outbox in the transaction that releases them and enqueued after it commits; if the process dies
in between, the sweeper (or ``resume``) enqueues them later. Enqueuing twice is harmless: the
claim makes the second a no-op.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import TypeAdapter

from genloop.sdk.errors import GraphError, NotFound, StoreError
from genloop.sdk.graph import Graph
from genloop.sdk.loop import Loop
from genloop.sdk.models import NodeStatus, RunSpec, RunStatus

from ..ops.registry import OpRegistry
from ..stores.base import StateStore
from ..stores.records import (
    FailedItem,
    InstanceRecord,
    ItemRef,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
)
from ..stores.steps import Finish, Finished, FinishOutcome, ScriptedCompletion, Start, Started
from .admission import runnable_problems
from .keys import spec_hash
from .planner import Topology, expand
from .transitions import Transitions, instance_event, new_event, record_ended

log = logging.getLogger(__name__)

Enqueue = Callable[[Sequence[InstanceRecord], float], None]
#: Messages waiting, not yet fetched by any worker, on a queue.
Backlog = Callable[[str], int]
T = TypeVar("T")
_SPEC = TypeAdapter(RunSpec)
_REFS = TypeAdapter(list[ItemRef])


#: Outbox entries ``(run id, NODE_MARK + node id)`` stand for a node whose instances all ended
#: and whose completion may still be due. Node ids cannot contain it.
NODE_MARK = "@"


@dataclass(frozen=True)
class Claim:
    """A delivery's claim on ``key`` for ``owner``, to start ``inst``'s attempt ``attempt``."""

    inst: InstanceRecord
    attempt: int
    key: str
    owner: str


@dataclass(frozen=True)
class Succeeded:
    """A started instance (as :meth:`Scheduler.claim_and_start` stored it), its new result and
    the ``(key, owner)`` lease that guarded the work."""

    inst: InstanceRecord
    result: ResultRecord
    lease: tuple[str, str] | None


#: How many just-sent instances a process with worker threads keeps for them (see JustSent).
KEEP_SENT = 20_000


class JustSent:
    """Instances this process just enqueued, for its own worker threads to take instead of
    reading them back from the store: a round trip less per message when the process that
    releases work also runs it (the embedded runtime, a map expanded by a worker). A copy is
    taken once, so a redelivery reads the store. It is as good as the stored record for
    starting: what a start reads from it (op, params, inputs, retry policy) never changes, and
    the start itself checks the stored status (an instance cancelled meanwhile does not run)."""

    def __init__(self, size: int = KEEP_SENT) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[str, str], InstanceRecord] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, instances: Sequence[InstanceRecord]) -> None:
        if not self.size:  # a process that runs nothing keeps nothing
            return
        with self._lock:
            for inst in instances:
                self._kept[inst.run_id, inst.instance_id] = inst
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def take(self, run_id: str, instance_id: str) -> InstanceRecord | None:
        with self._lock:
            return self._kept.pop((run_id, instance_id), None)


class Scheduler:
    """Drives runs through their life. ``enqueue(instances, delay_seconds)`` sends messages;
    ``resend`` (by default ``enqueue``) sends again what recovery found lost."""

    def __init__(
        self, store: StateStore, registry: OpRegistry, enqueue: Enqueue,
        queues: Sequence[str] | None = None, backlog: Backlog | None = None,
        complete_patience: float = 30.0, keep_sent: int = KEEP_SENT,
        resend: Enqueue | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.enqueue = enqueue
        self.resend = resend or enqueue
        self.queues = set(queues) if queues is not None else None
        self.backlog = backlog
        self.complete_patience = complete_patience
        self._topologies: OrderedDict[str, Topology] = OrderedDict()
        self.transitions = Transitions(registry, self.topology)
        #: ``keep_sent``: 0 in a process with no worker threads to take them (a gateway,
        #: ``Client.connect``), which would only fill it.
        self.just_sent = JustSent(keep_sent)
        self._topology_lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    # -- submit -----------------------------------------------------------------------------
    def submit(self, spec: Graph | Loop, idempotency_key: str | None = None) -> RunRecord:
        """Validate, store and start a run. Nothing is stored for an invalid spec."""
        spec = _SPEC.validate_python(spec)
        graph = spec.compile() if isinstance(spec, Loop) else spec
        if problems := runnable_problems(graph, self.registry, self.queues):
            raise GraphError(problems)
        return self.start(spec, graph, idempotency_key)

    def start(self, spec: Graph | Loop, graph: Graph,
              idempotency_key: str | None = None) -> RunRecord:
        """Store and start the run of an admitted spec: ``graph`` is ``spec`` compiled (``spec``
        itself for a Graph), which the caller checked (its graph problems, and any names and
        limits of its own); nothing is checked again."""
        spec_json = spec.model_dump(mode="json")
        run = RunRecord(
            id=uuid.uuid4().hex, spec_hash=spec_hash(spec_json), idempotency_key=idempotency_key,
            pending_nodes=len(graph.nodes),
            counts_ended=graph.limits is not None, created_at=time.time(),
            labels=spec.labels, keep_for=spec.retention,
        )
        submitted = RunSpecRecord(
            spec=spec_json, graph=spec_json if graph is spec else graph.model_dump(mode="json"))
        nodes, roots = [], []
        for node in graph.nodes:
            record = NodeRecord(run_id=run.id, node_id=node.id, waiting=len(node.inputs))
            if not node.inputs:
                instances = expand(run.id, node, self.registry[node.op], [])
                record.status = NodeStatus.QUEUED
                record.pending_instances = len(instances)
                roots.extend(instances)
            nodes.append(record)
        # The metrics of the stored roots and their release need the topology: built from the
        # dump at hand, not read back and parsed (a 1,000-node graph is ~300 KB of JSON: 5.6 ms
        # from the dict, 16.5 ms from JSON, plus the read). Not from ``graph``: the caller may
        # change it later.
        new_id = run.id
        self._keep_topology(new_id, Topology(Graph.model_validate(submitted.graph)))
        created = False
        try:
            run, created = self.store.create_run(run, submitted, nodes, roots)
        finally:
            if not created:  # nothing was stored under new_id (an idempotency hit, an error)
                with self._topology_lock:
                    self._topologies.pop(new_id, None)
        if created:
            log.info("run %s submitted: %d nodes", run.id, len(nodes))
            self.flush([(run.id, i.instance_id) for i in roots], roots)
        return run

    def topology(self, run_id: str) -> Topology:
        """The run's graph, indexed; cached, since a run's graph never changes. One thread
        reads and parses it while the others wait: every worker thread gets its first message
        of a new run at once, and a 2,000-node graph parsed by each of them at the same time
        cost seconds."""
        topo = self._topologies.get(run_id)
        if topo is not None:
            return topo
        with self._topology_lock:
            loading = self._loading.setdefault(run_id, threading.Lock())
        with loading:
            topo = self._topologies.get(run_id)
            if topo is None:
                topo = Topology(Graph.model_validate(self.store.run_spec(run_id).graph))
                self._keep_topology(run_id, topo)
        return topo

    def _keep_topology(self, run_id: str, topo: Topology) -> None:
        with self._topology_lock:
            self._topologies[run_id] = topo
            self._loading.pop(run_id, None)
            while len(self._topologies) > 512:
                self._topologies.popitem(last=False)

    # -- one instance's life ------------------------------------------------------------------
    def claim_and_start(self, inst: InstanceRecord, attempt: int, key: str, owner: str,
                        ttl: float) -> tuple[Started, float]:
        """Take the lease on ``key`` and mark ``inst`` running. Returns ``(outcome, lease)``:
        ``STARTED`` (``owner`` holds the lease), ``STORED`` (a result is there: complete with
        it), ``LEASED`` (someone else holds it, ``lease`` seconds left; the instance is
        touched, so the sweeper leaves it alone while its delivery looks again) or ``ENDED``
        (the instance must not run). One store step (a round trip on Redis)."""
        outcome, lease = self.claim_and_start_many([Claim(inst, attempt, key, owner)], ttl)[0]
        if outcome == Started.MISSING:
            raise NotFound(f"no instance {inst.instance_id!r} in run {inst.run_id!r}")
        return outcome, lease

    def claim_and_start_many(self, claims: Sequence[Claim],
                             ttl: float) -> list[tuple[Started, float]]:
        """:meth:`claim_and_start` for several instances (a chunk's, :mod:`.chunks`), in one
        store step; one not stored comes back ``MISSING``."""
        run_running = new_event("run.running", status="running")  # written once, if at all
        outcomes = self.store.start_instances([Start(
            running=c.inst.model_copy(update={
                "status": NodeStatus.RUNNING, "attempts": c.attempt, "result_key": c.key}),
            key=c.key, owner=c.owner, ttl=ttl,
            started=new_event("instance.started", node_id=c.inst.node_id,
                              instance_id=c.inst.instance_id, attempt=c.attempt,
                              status="running"),
            run_running=run_running) for c in claims])
        return [self._cancel_unstarted(c.inst) if outcome == Started.CANCELLING
                else (outcome, lease) for c, (outcome, lease) in zip(claims, outcomes, strict=True)]

    def _cancel_unstarted(self, inst: InstanceRecord) -> tuple[Started, float]:
        """The start found the run cancelling (its cancel left this instance to its delivery,
        as it was running or waiting on a retry then): end it cancelled, with what follows
        (its node, maybe the run), in a run transaction; it does not run, whatever result or
        lease its key has."""
        with self.store.transaction(inst.run_id) as tx:
            stored, run = tx.instance(inst.instance_id), tx.run()
            if not stored.status.terminal:
                self.transitions.instance_done(tx, run, stored, NodeStatus.CANCELLED)
                tx.put_run(run)
        return Started.ENDED, 0.0

    def retrying(self, run_id: str, instance_id: str, attempt: int, error: BaseException) -> None:
        """An attempt failed and Dramatiq will retry the message."""
        with self.store.transaction(run_id) as tx:
            inst = tx.instance(instance_id)
            if inst.status.terminal:
                return
            # Retries re-sends the message before this runs: the next attempt may be running.
            if inst.attempts <= attempt:
                inst.status = NodeStatus.QUEUED
                tx.put_instance(inst)
            tx.event(new_event("instance.retry", node_id=inst.node_id, instance_id=instance_id,
                         attempt=attempt, error=f"{type(error).__name__}: {error}"))

    def succeeded(self, run_id: str, instance_id: str, result: ResultRecord,
                  cached: bool = False, lease: tuple[str, str] | None = None,
                  started: InstanceRecord | None = None) -> None:
        """The instance produced ``result`` (or found it stored, ``cached``). A new result is
        stored in the same transaction that completes the instance and releases its children,
        and the ``(key, owner)`` lease that guarded the work is dropped with it. ``started``:
        the instance as :meth:`claim_and_start` stored it, which spares reading it again."""
        self._complete(run_id, instance_id, NodeStatus.SUCCEEDED, result=result, cached=cached,
                       lease=lease, started=started)

    def failed(self, run_id: str, instance_id: str, error: BaseException, attempts: int) -> None:
        self._complete(run_id, instance_id, NodeStatus.FAILED, error=error, attempts=attempts)

    def cancelled(self, run_id: str, instance_id: str) -> None:
        self._complete(run_id, instance_id, NodeStatus.CANCELLED)

    def succeeded_many(self, done: Sequence[Succeeded]) -> None:
        """:meth:`succeeded` for several started instances with new results (a chunk's), in one
        store step. What follows an instance's step (a node to complete, children to expand) is
        done for each in turn; one of those that fails is logged and left to the sweeper, which
        finds its outbox mark."""
        finishes = [self._scripted_finish(d.inst, d.result, False, d.lease) for d in done]
        outs = self._patiently(lambda: self.store.finish_instances(finishes), "a chunk")
        for d, f, out in zip(done, finishes, outs, strict=True):
            try:
                self._after_finish(d.inst, f, out)
            except Exception:  # noqa: BLE001  (the others' completions must still go on)
                log.exception("%s/%s: completing failed", d.inst.run_id, d.inst.instance_id)

    def _complete(self, run_id: str, instance_id: str, status: NodeStatus, **how) -> None:
        self._patiently(lambda: self._complete_once(run_id, instance_id, status, **how),
                        f"{run_id}/{instance_id}")

    def _patiently(self, complete: Callable[[], T], what: str) -> T:
        """Complete, retried with a capped backoff through a store outage (a Redis restart):
        the work is done and its lease still held, so it is worth landing. Retrying is safe:
        a completion that did commit finds the instance ended and stops. If the store stays
        away, the error propagates and the sweeper re-sends the instance once its lease ends."""
        deadline, delay = time.monotonic() + self.complete_patience, 0.1
        while True:
            try:
                return complete()
            except StoreError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("%s: completing failed (%s); retrying in %.1fs", what, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _complete_once(self, run_id: str, instance_id: str, status: NodeStatus, *,
                       result: ResultRecord | None = None, cached: bool = False,
                       error: BaseException | None = None, attempts: int = 1,
                       lease: tuple[str, str] | None = None,
                       started: InstanceRecord | None = None) -> None:
        if result is not None:
            inst = started or self.store.instance(run_id, instance_id)
            return self._finish_scripted(inst, result, cached, lease)
        with self.store.transaction(run_id) as tx:
            if lease is not None:
                tx.release(*lease)
            inst, run = tx.instance(instance_id), tx.run()
            if inst.status.terminal:
                return
            if error is not None:
                inst.failure = FailedItem(
                    node_id=inst.node_id, instance_id=instance_id,
                    error_type=type(error).__name__, message=str(error), attempts=attempts,
                    items=inst.expected_items,
                )
            released = self.transitions.instance_done(tx, run, inst, status)
            tx.put_run(run)
        self.flush([(run_id, i.instance_id) for i in released], released)

    def _finish_scripted(self, inst: InstanceRecord, result: ResultRecord, cached: bool,
                         lease: tuple[str, str] | None) -> None:
        """A success in one scripted step (a Redis script, SQLite's few statements; see
        ``stores/steps.py``), which also completes a node of one instance; otherwise,
        or for the children that became ready, a run transaction follows."""
        step = self._scripted_finish(inst, result, cached, lease)
        self._after_finish(inst, step, self.store.finish_instances([step])[0])

    def _scripted_finish(self, inst: InstanceRecord, result: ResultRecord, cached: bool,
                         lease: tuple[str, str] | None) -> Finish:
        run_id, node_id = inst.run_id, inst.node_id
        done = inst.model_copy(update={
            "status": NodeStatus.SUCCEEDED, "result_key": result.key,
            "outputs": len(result.items), "halted": result.halt})
        completion = None
        # A halt skips descendants: the transaction does that. An instance after the first
        # belongs to a node of several, which the step never completes: a map's items do not
        # build what it would need.
        if not result.halt and inst.seq == 0:
            completion = ScriptedCompletion(
                outputs_json=_REFS.dump_json(
                    [ItemRef(key=result.key, index=i) for i in range(len(result.items))]
                ).decode(),
                output_count=len(result.items),
                node_event=new_event("node.succeeded", node_id=node_id, status="succeeded"),
                run_event=new_event("run.succeeded", status="succeeded"),
                children=self.topology(run_id).children[node_id])
        return Finish(done, instance_event(done, cached), None if cached else result, lease,
                      completion)

    def _after_finish(self, inst: InstanceRecord, step: Finish, out: FinishOutcome) -> None:
        """What follows a scripted finish: completing with the result stored first by another
        execution, and the node or children the step left to a run transaction."""
        run_id, node_id = inst.run_id, inst.node_id
        if out.step is Finished.OTHER_RESULT:  # complete with the result stored first
            key = step.done.result_key
            stored = self.store.get_result(key) if key is not None else None
            if stored is None:  # a step with a result always names its key; retention lags
                raise StoreError(f"the result {key!r} stored first for instance "
                                 f"{inst.instance_id!r} of run {run_id!r} is gone")
            return self._finish_scripted(inst, stored, True, None)
        if out.step is Finished.MISSING:
            raise NotFound(f"no instance {inst.instance_id!r} in run {run_id!r}")
        if out.step is Finished.COUNTED and out.pending == 0:
            self.finish_node(run_id, node_id)
        if out.run_ended:
            log.info("run %s %s", run_id, RunStatus.SUCCEEDED.value)
        for child in out.ready:
            self.finish_node(run_id, child)

    def finish_node(self, run_id: str, node_id: str) -> None:
        """Take a node through the transition that may be due, then clear its outbox mark:
        complete it when its instances have all ended (after a scripted completion, or from the
        sweeper when the worker that counted it down died), or expand it into instances when
        its parents have all ended (released by a script)."""
        released: list[InstanceRecord] = []
        with self.store.transaction(run_id, shared=True) as tx:
            node, run = tx.node(node_id), tx.run()
            ready = node.status == NodeStatus.PENDING and node.waiting <= 0
            done = not node.status.terminal and node.status != NodeStatus.PENDING \
                and node.pending_instances <= 0
            if (ready or done) and not run.status.terminal:
                # A script may start the run's first instance meanwhile; this write of the run
                # must not take it back to pending. (Every completion so far was cached.)
                if run.status == RunStatus.PENDING:
                    run.status = RunStatus.RUNNING
                if ready:
                    released = self.transitions.node_ready(tx, run, self.topology(run_id), node)
                else:
                    released = self.transitions.node_done(tx, run, node)
                tx.put_run(run)
        self.flush([(run_id, NODE_MARK + node_id)] + [(run_id, i.instance_id) for i in released],
                   released)

    # -- cancel, resume, outbox ----------------------------------------------------------------
    def cancel(self, run_id: str) -> RunRecord:
        """Cancel what has not started; running instances stop at their next check."""
        with self.store.transaction(run_id) as tx:
            run = tx.run()
            if run.status.terminal or run.cancel_requested:
                return run
            run.cancel_requested = True
            tx.event(new_event("run.cancelling", status="cancelling"))
            for node_id in self.topology(run.id).nodes:
                node = tx.node(node_id)
                if node.status.terminal:
                    continue
                running = 0
                for inst in tx.instances(node_id):
                    if inst.status == NodeStatus.RUNNING:
                        running += 1
                    elif not inst.status.terminal:
                        inst.status = NodeStatus.CANCELLED
                        tx.put_instance(inst)
                node.pending_instances = running
                if running:
                    tx.put_node(node)
                else:
                    node.status = NodeStatus.CANCELLED
                    tx.put_node(node)
                    record_ended(tx, run, node)
                    tx.event(new_event("node.cancelled", node_id=node_id, status="cancelled"))
                    run.pending_nodes -= 1
            if run.pending_nodes == 0:
                self.transitions.run_ended(tx, run)
            tx.put_run(run)
            return run

    def resume(self, run_id: str) -> RunRecord:
        """Re-enqueue every unfinished instance of a run (after a crash). Stored results are
        reused and live claims respected, so this is safe to call at any time."""
        run = self.store.get_run(run_id)
        if run.status.terminal:
            return run
        pending = [i for i in self.store.instances(run_id) if not i.status.terminal]
        self.store.append_event(run_id, new_event("run.resumed",
                                                  message=f"{len(pending)} instance(s)"))
        self.flush([(run_id, i.instance_id) for i in pending], pending)
        return self.store.get_run(run_id)

    def flush(self, entries: Sequence[tuple[str, str]],
              instances: Sequence[InstanceRecord]) -> None:
        """Enqueue the caller's ``instances`` (none is read back), then clear ``entries``
        (instance ids and node marks) from the outbox."""
        if not entries:
            return
        self.just_sent.add(instances)
        self.enqueue(instances, 0.0)
        self.store.clear_outbox(entries)
