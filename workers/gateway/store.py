"""The gateway's own store: API keys, tenants' limits, and which tenant owns what.

Kept apart from the state store on purpose: the core runtime knows nothing of tenants. A run
belongs to the tenant that submitted it; an artifact is visible to a tenant once it appears in
the ``artifact`` field of an output of one of that tenant's runs. Two implementations sit side
by side, SQLite (next to the embedded home) and Redis (next to the Redis back end), and one
contract test runs on both.

API keys are random (256 bits), so a plain SHA-256 is enough to store them: nothing can be
brute-forced from the hash, and lookups stay one indexed read per request.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from pydantic import BaseModel

from genloop.sdk.models import RunResult, RunStatus

from .limits import TenantLimits

KEY_PREFIX = "gl_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id(key_hash: str) -> str:
    """A short public name for a key (safe to log and list; revoke by it)."""
    return key_hash[:12]


class KeyInfo(BaseModel):
    id: str
    tenant: str
    created_at: float
    revoked_at: float | None = None


class RunSummary(BaseModel):
    """What the console's runs list shows of a run: kept with an ended run when its result is
    indexed, so a page of the list reads no results (a result holds every candidate)."""

    status: RunStatus
    #: When the run ended (an ended run does not run again: resume leaves it as it is).
    finished_at: float | None = None
    images: int
    best_score: float | None = None

    @classmethod
    def of(cls, result: RunResult) -> RunSummary:
        best = result.best
        return cls(status=result.status, finished_at=result.finished_at,
                   images=result.compute.images,
                   best_score=best.score if best is not None else None)


class GatewayStore(ABC):
    """Keys, limits, ownership. Every method is safe to call from many threads."""

    def create_key(self, tenant: str) -> str:
        """A new API key for ``tenant``; only its hash is kept, so print it now or lose it."""
        if not tenant or not tenant.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"tenant names are letters, digits, '-' and '_'; got {tenant!r}")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        digest = hash_key(key)
        self._put_key(digest, KeyInfo(id=key_id(digest), tenant=tenant, created_at=time.time()))
        return key

    def revoke(self, key_or_id: str) -> KeyInfo | None:
        """Revoke a key given itself or its id; ``None`` if no such key."""
        digest = hash_key(key_or_id) if key_or_id.startswith(KEY_PREFIX) else None
        return self._revoke(digest, None if digest else key_or_id)

    @abstractmethod
    def _put_key(self, key_hash: str, info: KeyInfo) -> None: ...

    @abstractmethod
    def _revoke(self, key_hash: str | None, key_id: str | None) -> KeyInfo | None: ...

    @abstractmethod
    def keys(self) -> list[KeyInfo]: ...

    @abstractmethod
    def tenant_of(self, key: str) -> str | None:
        """The tenant of a live key, ``None`` for an unknown or revoked one."""

    @abstractmethod
    def set_limits(self, tenant: str, limits: TenantLimits) -> None: ...

    @abstractmethod
    def limits(self, tenant: str) -> TenantLimits | None:
        """The tenant's own limits, ``None`` to use the gateway's defaults."""

    @abstractmethod
    def add_run(self, run_id: str, tenant: str, idempotency_key: str | None = None,
                cost: float = 0.0) -> bool:
        """Record that ``tenant`` owns ``run_id`` of ``cost`` megapixel-steps; ``False`` if it
        was recorded already."""

    @abstractmethod
    def run_cost(self, run_id: str) -> float:
        """The cost recorded with the run (0 if none), for the concurrent-cost limit."""

    @abstractmethod
    def run_for_key(self, idempotency_key: str) -> str | None:
        """The run recorded with this (tenant-scoped) idempotency key, if any."""

    @abstractmethod
    def owner(self, run_id: str) -> str | None: ...

    @abstractmethod
    def runs(self, tenant: str, before: float | None = None,
             limit: int = 50) -> list[tuple[str, float]]:
        """The tenant's runs newest first, as ``(run id, created at)``, those created strictly
        before ``before`` when it is given (the console's pages)."""

    @abstractmethod
    def open_runs(self, tenant: str) -> list[str]:
        """The tenant's runs not yet seen to end (for the concurrency limit)."""

    @abstractmethod
    def mark_ended(self, run_id: str) -> None: ...

    @abstractmethod
    def unindexed_runs(self, tenant: str) -> list[str]:
        """The tenant's runs whose final artifacts have not been recorded yet."""

    @abstractmethod
    def mark_indexed(self, run_id: str, summary: RunSummary) -> None:
        """The ended run's artifacts are recorded; keep ``summary`` for the runs list."""

    @abstractmethod
    def summary(self, run_id: str) -> RunSummary | None:
        """The summary kept by :meth:`mark_indexed`, ``None`` before."""

    def list_earlier_runs(self, created_at: Callable[[str], float | None]) -> int:
        """List the runs recorded before :meth:`runs` had an index, at ``created_at(run_id)``
        (``None``: the run is gone, leave it out); how many. Once per store; stores that always
        had the index have nothing to do."""
        return 0

    @abstractmethod
    def add_artifacts(self, tenant: str, keys: Iterable[str]) -> None: ...

    @abstractmethod
    def has_artifact(self, tenant: str, key: str) -> bool: ...

    @abstractmethod
    def ping(self) -> None:
        """Raise ``StoreError`` if the store cannot be reached."""

    def close(self) -> None:
        """Release connections."""
