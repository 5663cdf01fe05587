"""A run's node and run transitions, written inside a run transaction (see
:mod:`.scheduler`, which decides when they happen): an instance ended, a node ended (collect
its outputs, release or skip its children), a child became ready (quorum, expansion into
instances and the outbox), the run ended. Each appends its events in the same transaction."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from genloop.sdk.models import NodeStatus, RunStatus

from ..ops.registry import OpRegistry
from ..stores.base import RunTx
from ..stores.records import EventRecord, InstanceRecord, ItemRef, NodeRecord, RunRecord
from .planner import (
    Topology,
    expand,
    is_elementwise,
    limits_problem,
    op_spec,
    quorum_problem,
)

log = logging.getLogger(__name__)


def new_event(type_: str, **fields) -> EventRecord:
    """An event of the run, stamped now."""
    return EventRecord(type=type_, time=time.time(), **fields)


def instance_event(inst: InstanceRecord, cached: bool = False) -> EventRecord:
    """The event that says how ``inst`` stands now."""
    status = inst.status
    value = status.value
    return new_event(
        f"instance.{value}", node_id=inst.node_id, instance_id=inst.instance_id,
        status=value, attempt=inst.attempts or None,
        error=f"{inst.failure.error_type}: {inst.failure.message}" if inst.failure else None,
        message=(f"{inst.outputs} item(s)" + (", cached" if cached else ""))
        if status == NodeStatus.SUCCEEDED else None,
    )


def record_ended(tx: RunTx, run: RunRecord, node: NodeRecord) -> None:
    """Keep ``node``'s output count (it just ended) for the run's limits check."""
    if run.counts_ended:
        tx.count_ended(node.node_id, len(node.outputs))


class Transitions:
    """The scheduler's transitions inside a transaction, over its ops (``registry``) and its
    runs' graphs (``topology``)."""

    def __init__(self, registry: OpRegistry, topology: Callable[[str], Topology]) -> None:
        self.registry, self.topology = registry, topology

    def instance_done(self, tx: RunTx, run: RunRecord, inst: InstanceRecord,
                       status: NodeStatus) -> list[InstanceRecord]:
        """``inst`` failed or was cancelled (a success is one scripted step, see
        :meth:`.Scheduler._finish_scripted`)."""
        inst.status = status
        tx.put_instance(inst)
        tx.event(instance_event(inst))
        node = tx.node(inst.node_id)
        node.pending_instances -= 1
        if node.pending_instances > 0:
            tx.put_node(node)
            return []
        return self.node_done(tx, run, node)

    def node_done(self, tx: RunTx, run: RunRecord, node: NodeRecord) -> list[InstanceRecord]:
        """All instances of ``node`` ended: collect its output, then release its children."""
        instances = tx.instances(node.node_id)
        for inst in instances:
            if inst.status == NodeStatus.SUCCEEDED:
                node.outputs.extend(
                    ItemRef(key=inst.result_key, index=i) for i in range(inst.outputs)
                )
                node.halted = node.halted or inst.halted
            elif inst.status == NodeStatus.FAILED and inst.failure is not None:
                node.failures.append(inst.failure)
        if run.cancel_requested:
            status = NodeStatus.CANCELLED
        elif not instances or any(i.status == NodeStatus.SUCCEEDED for i in instances):
            status = NodeStatus.SUCCEEDED
        else:
            status = NodeStatus.FAILED
            failure = next(i.failure for i in instances if i.failure is not None)
            node.error = f"{failure.error_type}: {failure.message}"
        return self._node_ended(tx, run, node, status)

    def _node_ended(self, tx: RunTx, run: RunRecord, node: NodeRecord,
                    status: NodeStatus) -> list[InstanceRecord]:
        node.status = status
        tx.put_node(node)
        record_ended(tx, run, node)
        tx.event(new_event(
            f"node.{status.value}", node_id=node.node_id, status=status.value, error=node.error,
            message="halted: later rounds skipped" if node.halted else None,
        ))
        run.pending_nodes -= 1
        if status == NodeStatus.FAILED and run.error is None:
            run.error = f"node {node.node_id}: {node.error}"
        topo = self.topology(run.id)
        released: list[InstanceRecord] = []
        if status != NodeStatus.SUCCEEDED or node.halted:
            reason = "halted upstream" if node.halted else f"input {node.node_id} {status.value}"
            self._skip_descendants(tx, run, topo, node.node_id, reason)
        else:
            for child_id in topo.children[node.node_id]:
                child = tx.node(child_id)
                if child.status.terminal:
                    continue
                child.waiting -= 1
                if child.waiting > 0:
                    tx.put_node(child)
                else:
                    released.extend(self.node_ready(tx, run, topo, child))
        if run.pending_nodes == 0:
            self.run_ended(tx, run)
        return released

    def node_ready(self, tx: RunTx, run: RunRecord, topo: Topology,
                    node: NodeRecord) -> list[InstanceRecord]:
        graph_node = topo.nodes[node.node_id]
        spec = op_spec(self.registry, graph_node)
        parents = [tx.node(p) for p in graph_node.inputs]
        ok = [ref for p in parents for ref in p.outputs]
        failed = [f for p in parents for f in p.failures]
        problem = quorum_problem(graph_node, spec, ok, failed)
        if problem is not None:
            node.error = f"QuorumError: {problem}"
            return self._node_ended(tx, run, node, NodeStatus.FAILED)
        limits = topo.graph.limits
        if limits is not None:
            # Each ended node's real output count, in place of what was planned at submit.
            known = tx.ended_counts() if run.counts_ended else {
                nid: len(n.outputs) for nid in topo.nodes if (n := tx.node(nid)).status.terminal}
            problem = limits_problem(topo.graph, self.registry, limits, node.node_id, known)
            if problem is not None:
                node.error = f"LimitExceeded: {problem}"
                return self._node_ended(tx, run, node, NodeStatus.FAILED)
        if is_elementwise(graph_node, spec):
            node.failures = list(failed)
        instances = expand(run.id, graph_node, spec, ok)
        if not instances:
            return self._node_ended(tx, run, node, NodeStatus.SUCCEEDED)
        for inst in instances:
            tx.put_instance(inst)
        tx.add_outbox([i.instance_id for i in instances])
        node.status, node.pending_instances = NodeStatus.QUEUED, len(instances)
        tx.put_node(node)
        tx.event(new_event("node.queued", node_id=node.node_id, status="queued",
                     message=f"{len(instances)} instance(s)"))
        return instances

    def _skip_descendants(self, tx: RunTx, run: RunRecord, topo: Topology, node_id: str,
                          reason: str) -> None:
        for nid in topo.descendants(node_id):
            node = tx.node(nid)
            if node.status.terminal:
                continue
            node.status, node.error = NodeStatus.SKIPPED, reason
            tx.put_node(node)
            record_ended(tx, run, node)
            tx.event(new_event("node.skipped", node_id=nid, status="skipped", message=reason))
            run.pending_nodes -= 1

    def run_ended(self, tx: RunTx, run: RunRecord) -> None:
        if run.cancel_requested:
            run.status = RunStatus.CANCELLED
        elif run.error is not None:
            run.status = RunStatus.FAILED
        else:
            run.status = RunStatus.SUCCEEDED
        run.finished_at = time.time()
        tx.event(new_event(f"run.{run.status.value}", status=run.status.value, error=run.error))
        log.info("run %s %s", run.id, run.status.value)
