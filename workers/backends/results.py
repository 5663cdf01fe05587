"""Reading runs back for clients: ``RunInfo`` and ``RunResult`` from the state store."""

from __future__ import annotations

from genloop.sdk.graph import Graph
from genloop.sdk.models import (
    Failure,
    NodeOutput,
    NodeState,
    NodeStatus,
    RunInfo,
    RunPage,
    RunQuery,
    RunResult,
)

from ..stores.base import StateStore
from ..stores.records import ResultRecord, RunRecord
from .run_listing import RunFilter, list_page


def run_info(store: StateStore, run_id: str) -> RunInfo:
    run = store.get_run(run_id)
    return RunInfo(
        id=run.id, status=run.status, created_at=run.created_at, finished_at=run.finished_at,
        error=run.error, labels=run.labels, pinned=run.pinned,
        nodes=[
            NodeState(node_id=n.node_id, status=n.status, halted=n.halted, error=n.error)
            for n in store.nodes(run_id)
        ],
    )


def list_runs(store: StateStore, query: RunQuery) -> RunPage:
    """A page of the store's runs (:mod:`.run_listing`); a listed run's ``nodes`` are left
    out (``get`` has them)."""
    def rows(before: tuple[float, str] | None, n: int) -> list[tuple[float, str, RunRecord]]:
        return [(r.created_at, r.id, r) for r in store.runs_before(before, n)]

    def info(run: RunRecord) -> RunInfo:
        return RunInfo(id=run.id, status=run.status, created_at=run.created_at,
                       finished_at=run.finished_at, error=run.error, labels=run.labels,
                       pinned=run.pinned)

    return list_page(rows, info, RunFilter.of(query), query.cursor, query.limit)


def run_result(store: StateStore, run_id: str) -> RunResult:
    """Outputs of every node (successful items, in order) and every failed instance."""
    run = store.get_run(run_id)
    graph = Graph.model_validate(store.run_spec(run_id).graph)
    ops = {n.id: n.op for n in graph.nodes}
    cache: dict[str, ResultRecord | None] = {}

    def item(key: str, index: int):
        if key not in cache:
            cache[key] = store.get_result(key)
        result = cache[key]
        return result.items[index] if result is not None else None

    outputs = {}
    for node in store.nodes(run_id):
        items = (
            [item(ref.key, ref.index) for ref in node.outputs]
            if node.status == NodeStatus.SUCCEEDED else []
        )
        outputs[node.node_id] = NodeOutput(
            node_id=node.node_id, op=ops[node.node_id], status=node.status, items=items,
            error=node.error,
        )
    order = {n.id: i for i, n in enumerate(graph.nodes)}
    failures = sorted(
        (
            Failure(**inst.failure.model_dump())
            for inst in store.instances(run_id)
            if inst.status == NodeStatus.FAILED and inst.failure is not None
        ),
        key=lambda f: (order[f.node_id], f.instance_id),
    )
    ordered = dict(sorted(outputs.items(), key=lambda kv: order[kv[0]]))
    return RunResult(
        run_id=run_id, status=run.status, outputs=ordered, failures=failures, error=run.error,
        created_at=run.created_at, finished_at=run.finished_at,
    )
