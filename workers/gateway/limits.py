"""Per-tenant limits, and how large a submitted run is.

A tenant may have ``max_concurrent_runs`` runs unfinished at once and ask for at most
``max_candidates_per_run`` images in one run. Going over either is answered 429 with
``Retry-After``; the SDK retries the first (runs finish) but not the second (the run itself is
too large, so waiting changes nothing: split it or ask for a higher limit).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from genloop.sdk.graph import Graph
from genloop.sdk.loop import Loop
from genloop.sdk.ops import GenerateParams, RefineParams


class TenantLimits(BaseModel):
    max_concurrent_runs: int = Field(8, ge=1, description="unfinished runs at once")
    max_candidates_per_run: int = Field(1024, ge=1, description="images one run may generate")


class LimitExceeded(Exception):
    """A tenant's limit refuses the request; the gateway answers 429."""

    def __init__(self, code: str, message: str, limit: int, requested: int) -> None:
        super().__init__(message)
        self.code, self.limit, self.requested = code, limit, requested


def candidate_count(spec: Graph | Loop) -> int:
    """Images the run will generate at most.

    A plain generate node makes ``n``; a generate node mapped over a refine node makes one per
    request, and a refine asks for its ``candidates``. A generate mapped over anything else is
    counted as one image per item of an unknown list, i.e. ``n`` (a lower bound).
    """
    graph = spec.compile() if isinstance(spec, Loop) else spec
    by_id = {node.id: node for node in graph.nodes}
    total = 0
    for node in graph.nodes:
        if node.op != "generate":
            continue
        parent = by_id.get(node.inputs[0]) if node.map and node.inputs else None
        if parent is not None and parent.op == "refine":
            total += _int_param(parent.params, RefineParams, "candidates")
        else:
            total += _int_param(node.params, GenerateParams, "n")
    return total


def _int_param(params: dict[str, Any], model: type[BaseModel], name: str) -> int:
    # Counted before validation (which reports bad params with their node ids): read leniently.
    value = params.get(name, model.model_fields[name].default)
    return value if isinstance(value, int) and value > 0 else 1

def check_candidates(spec: Graph | Loop, limits: TenantLimits) -> None:
    wanted = candidate_count(spec)
    if wanted > limits.max_candidates_per_run:
        raise LimitExceeded(
            "candidate_limit",
            f"this run would generate {wanted} images; your limit is "
            f"{limits.max_candidates_per_run} per run: split it into smaller runs",
            limits.max_candidates_per_run, wanted,
        )


def check_concurrency(open_runs: int, limits: TenantLimits) -> None:
    if open_runs >= limits.max_concurrent_runs:
        raise LimitExceeded(
            "concurrency_limit",
            f"{open_runs} runs still unfinished; your limit is {limits.max_concurrent_runs} at "
            "once: retry after one ends",
            limits.max_concurrent_runs, open_runs + 1,
        )
