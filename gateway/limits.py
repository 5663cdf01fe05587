"""Per-tenant limits, and the checks that apply them to a costed run.

A tenant may have ``max_concurrent_runs`` runs unfinished at once, whose costs add up to at most
``max_concurrent_cost``; one run may generate at most ``max_candidates_per_run`` images and cost
at most ``max_cost_per_run``. Cost is in megapixel-steps, retries included (see
:func:`genloop.workers.runtime.planner.run_cost`). Going over any is answered 429 with the figures
(``limit``, ``requested``) and ``Retry-After``; the SDK retries the concurrent limits (runs
finish) but not the per-run ones (the run itself is too large: split it or ask for more).

Uploads have quotas of their own: ``max_uploads`` images and ``max_upload_bytes`` in all, and
at most ``uploads_per_minute``; and a tenant may hold ``max_event_streams`` event streams open at
once (each is a connection and a poller). These are 429 with ``Retry-After`` too. Webhook
deliveries are the tenant's too: at most ``webhook_attempts_per_minute`` attempts a minute are
made for it (retries included); the rest wait, none is dropped.

Storage: a tenant's finished runs are kept at most ``retention`` seconds (the pool's when
``None``), and at most ``max_stored_runs`` runs may be stored at once (429 past it).

``models`` and ``evaluators`` narrow what the operator allows for this tenant (``None``: all).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from genloop.sdk.graph import Priority
from genloop.workers.runtime.planner import RunCost


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
    max_uploads: int = Field(1_000, ge=0, description="images a tenant may upload in all")
    max_upload_bytes: int = Field(
        1_000_000_000, ge=0, description="bytes of uploaded images a tenant may store in all")
    uploads_per_minute: int = Field(60, ge=1, description="uploads a tenant may make a minute")
    max_event_streams: int = Field(
        32, ge=1, description="event streams (API and console) a tenant may hold open at once")
    webhook_attempts_per_minute: int = Field(
        120, ge=1, description="webhook delivery attempts the gateway makes for a tenant a "
        "minute (retries included); past it a delivery waits for the next minute")
    models: list[str] | None = Field(None, description="models allowed; None: the operator's")
    evaluators: list[str] | None = Field(
        None, description="evaluators allowed; None: every registered one"
    )
    retention: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="seconds the tenant's finished runs are "
        "kept at most (a run's own `retention` may only shorten it); None: the pool's")
    max_stored_runs: int | None = Field(
        None, ge=1, description="runs the tenant may have stored at once, ended ones included "
        "until the retention deletes them (pinned ones too); None: no limit")
    priority: Priority = Field(
        "interactive", description="lane of the tenant's runs that name none (a spec's "
        "`priority` wins): a tenant that only runs campaigns or bulk jobs can default to batch")


class LimitExceeded(Exception):
    """A tenant's limit refuses the request; the gateway answers 429, with ``retry_after``
    seconds when the limit says when (a rate's window), else the gateway's default."""

    def __init__(self, code: str, message: str, limit: float, requested: float,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code, self.limit, self.requested = code, limit, requested
        self.retry_after = retry_after


def check_upload(limits: TenantLimits, used: tuple[int, int], size: int) -> None:
    """The upload quotas, given the tenant's ``used`` (images, bytes) and a new image's size."""
    images, stored = used
    if images + 1 > limits.max_uploads:
        raise LimitExceeded(
            "upload_quota", f"you have uploaded {images} images; your limit is "
            f"{limits.max_uploads}", limits.max_uploads, images + 1)
    if stored + size > limits.max_upload_bytes:
        raise LimitExceeded(
            "upload_quota", f"your uploads hold {stored} bytes and this image {size}; your "
            f"limit is {limits.max_upload_bytes} bytes in all", limits.max_upload_bytes,
            stored + size)


def check_storage(stored_runs: int, limits: TenantLimits) -> None:
    """The storage quota, given how many runs the tenant has stored."""
    if limits.max_stored_runs is not None and stored_runs >= limits.max_stored_runs:
        raise LimitExceeded(
            "storage_quota", f"you have {stored_runs} runs stored; your limit is "
            f"{limits.max_stored_runs}: unpin some, or wait for the retention to delete ended "
            "ones", limits.max_stored_runs, stored_runs + 1)


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
