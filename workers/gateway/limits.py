"""Per-tenant limits, and the checks that apply them to a costed run.

A tenant may have ``max_concurrent_runs`` runs unfinished at once, whose costs add up to at most
``max_concurrent_cost``; one run may generate at most ``max_candidates_per_run`` images and cost
at most ``max_cost_per_run``. Cost is in megapixel-steps, retries included (see
:func:`genloop.workers.planner.run_cost`). Going over any is answered 429 with the figures
(``limit``, ``requested``) and ``Retry-After``; the SDK retries the concurrent limits (runs
finish) but not the per-run ones (the run itself is too large: split it or ask for more).

``models`` and ``evaluators`` narrow what the operator allows for this tenant (``None``: all).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..planner import RunCost


class TenantLimits(BaseModel):
    max_concurrent_runs: int = Field(8, ge=1, description="unfinished runs at once")
    max_candidates_per_run: int = Field(1024, ge=1, description="images one run may generate")
    max_cost_per_run: float = Field(
        100_000.0, gt=0, allow_inf_nan=False,
        description="megapixel-steps one run may cost, every retry counted (a 512x512 image "
        "of 25 steps with 3 retries costs about 26)",
    )
    max_concurrent_cost: float = Field(
        400_000.0, gt=0, allow_inf_nan=False,
        description="megapixel-steps of all unfinished runs together",
    )
    models: list[str] | None = Field(None, description="models allowed; None: the operator's")
    evaluators: list[str] | None = Field(
        None, description="evaluators allowed; None: every registered one"
    )


class LimitExceeded(Exception):
    """A tenant's limit refuses the request; the gateway answers 429."""

    def __init__(self, code: str, message: str, limit: float, requested: float) -> None:
        super().__init__(message)
        self.code, self.limit, self.requested = code, limit, requested


def check_run(cost: RunCost, limits: TenantLimits) -> None:
    """The per-run limits: images and cost of one run."""
    if cost.images > limits.max_candidates_per_run:
        raise LimitExceeded(
            "candidate_limit",
            f"this run would generate {cost.images} images; your limit is "
            f"{limits.max_candidates_per_run} per run: split it into smaller runs",
            limits.max_candidates_per_run, cost.images,
        )
    if cost.cost > limits.max_cost_per_run:
        raise LimitExceeded(
            "cost_limit",
            f"this run would cost up to {cost.cost:.1f} megapixel-steps (images x pixels x "
            f"steps x attempts); your limit is {limits.max_cost_per_run:g} per run: fewer or "
            "smaller images, fewer steps or retries",
            limits.max_cost_per_run, cost.cost,
        )


def check_concurrency(open_runs: int, open_cost: float, cost: RunCost,
                      limits: TenantLimits) -> None:
    """The concurrent limits, given what the tenant's unfinished runs hold."""
    if open_runs >= limits.max_concurrent_runs:
        raise LimitExceeded(
            "concurrency_limit",
            f"{open_runs} runs still unfinished; your limit is {limits.max_concurrent_runs} at "
            "once: retry after one ends",
            limits.max_concurrent_runs, open_runs + 1,
        )
    if open_cost + cost.cost > limits.max_concurrent_cost:
        raise LimitExceeded(
            "concurrent_cost_limit",
            f"your unfinished runs cost {open_cost:.1f} megapixel-steps and this one "
            f"{cost.cost:.1f}; your limit is {limits.max_concurrent_cost:g} at once: retry "
            "after one ends",
            limits.max_concurrent_cost, open_cost + cost.cost,
        )
