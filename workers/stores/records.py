"""Rows of the state store. Pydantic, so every store keeps them as the same JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, JsonValue

from genloop.sdk.models import EventData, NodeStatus, RunStatus


class ItemRef(BaseModel):
    """Item ``index`` of the result stored under ``key``."""

    key: str
    index: int


class FailedItem(BaseModel):
    """An item that did not come out: the instance that failed and why."""

    node_id: str
    instance_id: str
    error_type: str
    message: str
    attempts: int = 1
    items: int = 1


class RunSpecRecord(BaseModel):
    """What was submitted; written once with the run, never changed. Kept apart from the run's
    state so that the hot path (every completion reads and writes the run) stays O(1) in the
    size of the graph."""

    spec: dict[str, Any] = Field(description="the submitted Graph or Loop, in JSON form")
    graph: dict[str, Any] = Field(description="the graph that runs (a loop compiled)")


class RunRecord(BaseModel):
    """A run's mutable state."""

    id: str
    spec_hash: str
    idempotency_key: str | None = None
    status: RunStatus = RunStatus.PENDING
    cancel_requested: bool = False
    pending_nodes: int = 0
    counts_ended: bool = Field(
        False, description="the run keeps each ended node's output count beside its record "
        "(RunTx.ended_counts) for its limits check, so a node that becomes ready reads those, "
        "not every node of the run; False in a run without limits (nothing reads them) or in one "
        "stored before they were kept (the check then reads the nodes)")
    created_at: float
    finished_at: float | None = None
    error: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    pinned: bool = Field(False, description="kept whatever the retention (see retention.py)")
    keep_for: float | None = Field(
        None, description="seconds the run is kept once finished; None: the store's retention")


class NodeRecord(BaseModel):
    run_id: str
    node_id: str
    status: NodeStatus = NodeStatus.PENDING
    waiting: int = Field(0, description="input nodes not yet terminal")
    pending_instances: int = 0
    halted: bool = False
    outputs: list[ItemRef] = Field(default_factory=list)
    failures: list[FailedItem] = Field(default_factory=list)
    error: str | None = None


class InstanceRecord(BaseModel):
    """One execution unit of a node: a shard of a generate node, one item of a map node, or the
    whole node. This is what a Dramatiq message names."""

    run_id: str
    instance_id: str
    node_id: str
    seq: int = Field(description="order among the node's instances")
    status: NodeStatus = NodeStatus.QUEUED
    params: dict[str, Any] = Field(default_factory=dict, description="the node's params, patched")
    inputs: list[ItemRef] = Field(default_factory=list)
    expected_items: int = 1
    result_key: str | None = None
    outputs: int = Field(0, description="items its result holds, once succeeded")
    halted: bool = False
    attempts: int = 0
    queue: str = "cpu"
    max_retries: int = 3
    min_backoff: float = 0.2
    max_backoff: float = 30.0
    failure: FailedItem | None = None


class ResultRecord(BaseModel):
    """An op execution's output, stored under its result key and reused by any run."""

    key: str
    op: str
    items: list[JsonValue]
    output: str | None = Field(None, description="the op's declared output model of the items, "
                               "as module:QualName (see genloop.workers.ops.typed_inputs)")
    halt: bool = False
    created_at: float


class Storage(BaseModel):
    """What a state store holds now, for operators (``genloop pool status``, metrics)."""

    runs: int = Field(description="runs stored, unfinished ones included")
    expiring: int = Field(description="finished runs with their expiry scheduled")
    pinned: int = Field(description="pinned runs (never expire)")
    results_expiring: int = Field(description="results with a time they are kept until")
    bytes: int = Field(description="the store's size: Redis's used memory, SQLite's files")


#: An event before the store gives it an id: the SDK's event body, shared rather than copied.
EventRecord = EventData
