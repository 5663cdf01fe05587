"""What the console's pages show, computed from the gateway's own calls (no HTML here).

- :func:`run_rows`: a tenant's runs, newest first, a page at a time, optionally of one status;
- :func:`dag`: a run's graph laid out in layers (longest path from a root), for an SVG;
- :func:`round_rows`: a loop's rounds, one row each, every candidate in its place (scored,
  generated and not yet scored, or failed with its error), the round's best marked.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from genloop.sdk.errors import NotFound
from genloop.sdk.graph import Graph
from genloop.sdk.models import Failure, NodeState, RunResult, RunStatus
from genloop.sdk.ops import Candidate, ScoredCandidate

from .service import Gateway

PAGE_SIZE = 20
#: How many of a tenant's runs a status filter reads at most per page (each costs a status read).
SCAN_LIMIT = 500


@dataclass
class RunRow:
    id: str
    status: str
    created_at: float
    tenant: str
    images: int
    best_score: float | None

    @property
    def age(self) -> str:
        return age(time.time() - self.created_at)


def age(seconds: float) -> str:
    """``'42 s'``, ``'5 min'``, ``'3 h'``, ``'2 d'``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{max(int(seconds), 0)} s"


def run_rows(gateway: Gateway, tenant: str, status: RunStatus | None = None,
             before: float | None = None,
             page_size: int = PAGE_SIZE) -> tuple[list[RunRow], float | None]:
    """A page of the tenant's runs and the cursor of the next page (``None`` on the last).

    Each run's status is read first (a status filter skips a run on that alone); a row shown
    reads the summary the gateway keeps of an ended run, never its whole result again."""
    rows: list[RunRow] = []
    scanned = 0
    cursor = before
    while len(rows) < page_size and scanned < SCAN_LIMIT:
        batch = gateway.store.runs(tenant, before=cursor, limit=page_size + 1)
        if not batch:
            return rows, None
        for run_id, created_at in batch:
            scanned += 1
            cursor = created_at
            try:
                info = gateway.get(tenant, run_id)
                if status is not None and info.status != status:
                    continue
                if len(rows) == page_size:
                    return rows, rows[-1].created_at
                summary = gateway.summary(tenant, run_id, info)
            except NotFound:  # the back end lost it (a wiped home): nothing to show
                continue
            rows.append(RunRow(id=run_id, status=summary.status.value, created_at=created_at,
                               tenant=tenant, images=summary.images,
                               best_score=summary.best_score))
    # A full page (its last run not yet known to be the tenant's last) or a scan cut short.
    return rows, (rows[-1].created_at if len(rows) == page_size else
                  cursor if scanned >= SCAN_LIMIT else None)


# -- the graph ---------------------------------------------------------------------------------
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 214, 52, 30, 14, 8


@dataclass
class DagNode:
    id: str
    op: str
    status: str
    x: int
    y: int
    error: str | None = None


@dataclass
class Dag:
    nodes: list[DagNode]
    edges: list[tuple[int, int, int, int]] = field(default_factory=list)
    width: int = 0
    height: int = 0
    box_w: int = BOX_W


def dag(graph: Graph, states: list[NodeState]) -> Dag:
    """Nodes in columns by depth (longest path from a root), edges as straight lines."""
    status = {s.node_id: s for s in states}
    depth: dict[str, int] = {}
    for node in graph.nodes:  # a valid graph lists parents before children
        depth[node.id] = 1 + max((depth[p] for p in node.inputs), default=-1)
    rows: dict[int, int] = {}
    nodes, at = [], {}
    for node in graph.nodes:
        col = depth[node.id]
        row = rows.get(col, 0)
        rows[col] = row + 1
        x, y = PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y)
        state = status.get(node.id)
        nodes.append(DagNode(id=node.id, op=node.op, x=x, y=y,
                             status=state.status.value if state else "pending",
                             error=state.error if state else None))
        at[node.id] = (x, y)
    edges = [(at[p][0] + BOX_W, at[p][1] + BOX_H // 2, at[n.id][0], at[n.id][1] + BOX_H // 2)
             for n in graph.nodes for p in n.inputs]
    width = PAD * 2 + (max(depth.values(), default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max(rows.values(), default=1) * (BOX_H + GAP_Y) - GAP_Y
    return Dag(nodes=nodes, edges=edges, width=width, height=height)


# -- a loop's rounds ---------------------------------------------------------------------------
_ROUND = re.compile(r"^round-(\d+)/")
_MAP_ITEM = re.compile(r"\[(\d+)\]$")
_SHARD = re.compile(r"#(\d+)$")


@dataclass
class Cell:
    round: int
    index: int
    candidate: Candidate | None = None
    failure: Failure | None = None
    best: bool = False

    @property
    def score(self) -> float | None:
        return self.candidate.score if isinstance(self.candidate, ScoredCandidate) else None


@dataclass
class RoundRow:
    round: int
    cells: list[Cell]

    @property
    def best_score(self) -> float | None:
        scores = [c.score for c in self.cells if c.score is not None]
        return max(scores) if scores else None


def _failed_positions(failure: Failure) -> tuple[int, list[int | None]]:
    """The round and candidate positions a failed generate or score instance stood for."""
    match = _ROUND.match(failure.node_id)
    round_ = int(match.group(1)) if match else 1
    if item := _MAP_ITEM.search(failure.instance_id):
        return round_, [int(item.group(1))]
    if shard := _SHARD.search(failure.instance_id):
        start = int(shard.group(1))
        return round_, list(range(start, start + failure.items))
    return round_, [None]


def round_rows(result: RunResult) -> list[RoundRow]:
    """Every candidate by round and position; failures where their candidates would be."""
    cells: dict[tuple[int, int], Cell] = {}
    for node_id, out in result.outputs.items():
        if out.op == "generate":
            for cand in result.items(node_id, Candidate):
                cells.setdefault((cand.round, cand.index), Cell(cand.round, cand.index, cand))
    for cand in result.scored:  # a score replaces the bare candidate it scored
        cells[(cand.round, cand.index)] = Cell(cand.round, cand.index, cand)
    extra = 10**9
    for failure in result.failures:
        if result.outputs.get(failure.node_id) is None or \
                result.outputs[failure.node_id].op not in ("generate", "score"):
            continue
        round_, positions = _failed_positions(failure)
        for index in positions:
            if index is None:
                index, extra = extra, extra + 1
            cells.setdefault((round_, index), Cell(round_, index, failure=failure))
    by_round: dict[int, list[Cell]] = {}
    for (round_, _), cell in sorted(cells.items()):
        by_round.setdefault(round_, []).append(cell)
    rows = [RoundRow(r, by_round[r]) for r in sorted(by_round)]
    for row in rows:
        best = row.best_score
        for cell in row.cells:
            cell.best = best is not None and cell.score == best
            if cell.best:
                break
    return rows
