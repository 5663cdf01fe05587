"""What the SDK hands back: run status, events and results. All pydantic, all with a JSON form."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, computed_field

from .graph import Graph
from .loop import Loop
from .ops import BUILTIN_OUTPUTS, Candidate, JudgeUsage, ScoredCandidate

#: What a client submits: a graph or a loop, told apart by their ``kind``.
RunSpec = Annotated[Graph | Loop, Field(discriminator="kind")]

M = TypeVar("M", bound=BaseModel)


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class NodeStatus(StrEnum):
    """A node's (or a node instance's) life: pending -> queued -> running -> end.

    A node waits ``pending`` until its inputs end; its instances are created ``queued``, in the
    same transaction that puts their messages in the outbox.
    """

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_NODE


_TERMINAL_NODE = {NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.SKIPPED, NodeStatus.CANCELLED}


class EventData(BaseModel):
    """What an event says; a store gives it its run and id when it is appended."""

    type: str = Field(description="run.*, node.*, instance.* or progress")
    time: float
    node_id: str | None = None
    instance_id: str | None = None
    status: str | None = None
    attempt: int | None = None
    error: str | None = None
    step: int | None = None
    total: int | None = None
    message: str | None = None


class Event(EventData):
    """One thing that happened in a run. ``id`` increases within a run; resume after it."""

    id: int
    run_id: str


class NodeState(BaseModel):
    node_id: str
    status: NodeStatus
    halted: bool = False
    error: str | None = None


class RunInfo(BaseModel):
    """A run's identity and status, cheap to fetch."""

    id: str
    status: RunStatus
    created_at: float
    finished_at: float | None = None
    nodes: list[NodeState] = Field(default_factory=list)
    error: str | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="the caller's labels")
    pinned: bool = Field(False, description="kept whatever the retention, with its results, "
                         "until unpinned")
    waiting: str | None = Field(
        None, description="what the run's queued work waits for that no live worker provides "
        "now (a pool scaled to zero): it goes on when such a worker starts")


class RunQuery(BaseModel):
    """Which runs to list, newest first: all filters must hold (labels: each key and value)."""

    model_config = ConfigDict(extra="forbid")

    cursor: str | None = Field(None, max_length=200,
                               description="the `next` of the page before; None: the newest")
    limit: int = Field(50, ge=1, le=200, description="most runs in the page")
    status: list[RunStatus] | None = Field(None, description="only runs in these states")
    labels: dict[str, str] = Field(default_factory=dict, max_length=16,
                                   description="only runs with each of these labels")
    since: float | None = Field(None, description="only runs created at or after (unix time)")
    until: float | None = Field(None, description="only runs created before (unix time)")


class RunPage(BaseModel):
    """One page of a listing of runs, newest first; ``next`` is the cursor of the page after
    it (``None`` on the last)."""

    runs: list[RunInfo]
    next: str | None = None


class Failure(BaseModel):
    """One failed node instance: which items it covered and why it failed."""

    node_id: str
    instance_id: str
    error_type: str
    message: str
    attempts: int
    items: int = Field(1, description="how many output items were lost with it")


class RoundSummary(BaseModel):
    round: int
    best_score: float | None
    best: ScoredCandidate | None
    candidates: list[ScoredCandidate]


class Compute(BaseModel):
    """What a run spent: the unit loops and best-of-N are compared in."""

    steps: int = Field(description="denoising steps of every image the run generated")
    images: int = Field(description="images the run generated")
    wall_s: float | None = Field(
        None, description="seconds from submission to the end (None while it runs)"
    )
    judge: JudgeUsage | None = Field(
        None, description="what hosted judges (vlm-judge) were billed for scoring the run's "
        "images; None when no hosted judge scored any",
    )


class NodeOutput(BaseModel):
    node_id: str
    op: str
    status: NodeStatus
    items: list[JsonValue] = Field(default_factory=list)
    error: str | None = None


class RunResult(BaseModel):
    """Everything a finished run produced.

    ``failures`` lists every failed item, also when the run as a whole succeeded. ``best`` is the
    highest-scored candidate of any score or select node; ``rounds`` gives a loop's per-round view.
    """

    run_id: str
    status: RunStatus
    outputs: dict[str, NodeOutput] = Field(default_factory=dict)
    failures: list[Failure] = Field(default_factory=list)
    error: str | None = None
    created_at: float | None = Field(None, description="when the run was submitted (epoch s)")
    finished_at: float | None = Field(None, description="when it ended (epoch s)")

    @computed_field(description="denoising steps, images, hosted judges' calls and tokens, "  # type: ignore[prop-decorator]
                    "and wall time the run spent")
    @property
    def compute(self) -> Compute:
        """Steps and images of every generate node's output, and what hosted judges were billed
        for its score nodes (a result reused from the result store counts as if it were made:
        the figure is the run's cost on an empty store)."""
        made = [
            c for node_id, out in self.outputs.items() if out.op == "generate"
            for c in self.items(node_id, Candidate)
        ]
        bills = [c.usage for c in self.scored if c.usage is not None]
        judge = sum(bills, JudgeUsage()) if bills else None
        wall = (None if self.finished_at is None or self.created_at is None
                else self.finished_at - self.created_at)
        return Compute(steps=sum(c.cost for c in made), images=len(made), wall_s=wall,
                       judge=judge)

    def items(self, node_id: str, model: type[M] | None = None) -> list[Any]:
        """The output items of ``node_id``, parsed as ``model`` (built-in ops know their own)."""
        out = self.outputs[node_id]
        model = model or BUILTIN_OUTPUTS.get(out.op)  # type: ignore[assignment]
        if model is None:
            return list(out.items)
        return [model.model_validate(item) for item in out.items]

    @property
    def scored(self) -> list[ScoredCandidate]:
        """Every scored candidate of the run, once each (score nodes' outputs)."""
        return [
            c for node_id, out in self.outputs.items() if out.op == "score"
            for c in self.items(node_id)
        ]

    @property
    def best(self) -> ScoredCandidate | None:
        scored = self.scored
        return max(scored, key=lambda c: c.score) if scored else None

    @property
    def rounds(self) -> list[RoundSummary]:
        by_round: dict[int, list[ScoredCandidate]] = {}
        for c in self.scored:
            by_round.setdefault(c.round, []).append(c)
        summaries = []
        for r in sorted(by_round):
            cands = sorted(by_round[r], key=lambda c: (c.round, c.index))
            best = max(cands, key=lambda c: c.score)
            summaries.append(
                RoundSummary(round=r, best_score=best.score, best=best, candidates=cands)
            )
        return summaries
