"""The gateway's own store: API keys, tenants' limits, and which tenant owns what.

Kept apart from the state store on purpose: the core runtime knows nothing of tenants. A run
belongs to the tenant that submitted it; an artifact is visible to a tenant once it appears in
the ``artifact`` field of an output of one of that tenant's runs. Two implementations sit side
by side, SQLite (next to the embedded home) and Redis (next to the Redis back end), and one
contract test runs on both.

API keys are random (256 bits), so a plain SHA-256 is enough to store them: nothing can be
brute-forced from the hash, and lookups stay one indexed read per request. Console sessions are
kept the same way: the browser holds a random session id, the store its hash and the key's hash,
so a session ends when it is signed out, expires, or its key is revoked.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field

from genloop.sdk.models import RunResult, RunStatus

from .limits import TenantLimits

KEY_PREFIX = "gl_"
#: How long a console session lasts without signing in again, seconds.
SESSION_TTL = 12 * 3600


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


class WebhookJob(BaseModel):
    """One delivery of a run's webhook, and how it stands (the gateway's outbox): the run's end
    (``webhook_id`` ``msg_<run>``), an event it asked for (``msg_<run>_<event id>``), or a
    tenant's notice of no run (``msg_n<hash of its key>``, ``run_id`` empty)."""

    webhook_id: str
    run_id: str
    tenant: str
    url: str
    kind: str = "run.ended"
    #: The run's end job: the other events it reports, and the last event id looked at.
    events: list[str] = Field(default_factory=list)
    after: int = 0
    #: An event job: what it says (the run's end job reads the run's result when it is sent).
    payload: dict[str, Any] | None = None
    state: Literal["pending", "delivered", "stopped", "failed"] = "pending"
    attempts: int = 0
    #: When it is next looked at (a run not yet ended, or a retry's time); None once done.
    next_at: float | None = None
    first_attempt_at: float | None = None
    last_status: int | None = None


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

    def tenant_of(self, key: str) -> str | None:
        """The tenant of a live key, ``None`` for an unknown or revoked one."""
        return self._tenant_of_hash(hash_key(key))

    @abstractmethod
    def _tenant_of_hash(self, key_hash: str) -> str | None: ...

    def create_session(self, key: str) -> str | None:
        """A new console session for a live ``key``: its id (give it to the browser; only its
        hash is kept), or ``None`` for an unknown or revoked key."""
        digest = hash_key(key)
        if self._tenant_of_hash(digest) is None:
            return None
        session = secrets.token_urlsafe(32)
        self._put_session(hash_key(session), digest, time.time() + SESSION_TTL)
        return session

    def session_tenant(self, session: str) -> str | None:
        """The tenant of a live session: ``None`` once it is ended, expired or its key revoked."""
        digest = self._session_key(hash_key(session))
        return None if digest is None else self._tenant_of_hash(digest)

    def end_session(self, session: str) -> None:
        self._drop_session(hash_key(session))

    @abstractmethod
    def _put_session(self, session_hash: str, key_hash: str, expires_at: float) -> None: ...

    @abstractmethod
    def _session_key(self, session_hash: str) -> str | None:
        """The key hash of an unexpired session."""

    @abstractmethod
    def _drop_session(self, session_hash: str) -> None: ...

    @abstractmethod
    def add_upload(self, tenant: str, key: str, size: int) -> None:
        """Record an image the tenant uploaded as the tenant's artifact, counted once per key
        in its usage."""

    @abstractmethod
    def upload_usage(self, tenant: str) -> tuple[int, int]:
        """``(images, bytes)`` the tenant has uploaded (for the upload quotas)."""

    @abstractmethod
    def hit(self, tenant: str, what: str, window: float) -> tuple[int, float]:
        """Count one ``what`` (``"upload"``) for ``tenant`` in the current fixed window of
        ``window`` seconds: ``(hits in the window, this one included; seconds until it
        ends)``, for rate limits."""

    @abstractmethod
    def set_limits(self, tenant: str, limits: TenantLimits) -> None: ...

    @abstractmethod
    def limits(self, tenant: str) -> TenantLimits | None:
        """The tenant's own limits, ``None`` to use the gateway's defaults."""

    @abstractmethod
    def add_run(self, run_id: str, tenant: str, idempotency_key: str | None = None,
                cost: float = 0.0, created_at: float | None = None) -> bool:
        """Record that ``tenant`` owns ``run_id`` of ``cost`` megapixel-steps, created at
        ``created_at`` (the run's own time, so listings filter and page on it; now if not
        given); ``False`` if it was recorded already."""

    @abstractmethod
    def run_cost(self, run_id: str) -> float:
        """The cost recorded with the run (0 if none), for the concurrent-cost limit."""

    @abstractmethod
    def run_for_key(self, idempotency_key: str) -> str | None:
        """The run recorded with this (tenant-scoped) idempotency key, if any."""

    @abstractmethod
    def owner(self, run_id: str) -> str | None: ...

    @abstractmethod
    def runs(self, tenant: str, before: float | None = None, limit: int = 50,
             before_id: str | None = None) -> list[tuple[str, float]]:
        """The tenant's runs newest first, as ``(run id, created at)``, those created strictly
        before ``before`` when it is given (the console's pages); with ``before_id``, ordered
        by ``(created at, run id)`` and strictly before ``(before, before_id)`` (a cursor that
        pages without gaps however many runs share a time)."""

    @abstractmethod
    def stored_runs(self, tenant: str) -> int:
        """How many of the tenant's runs are recorded (until forgotten)."""

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
    def forget_at(self, run_id: str, at: float) -> None:
        """Look at the ended run again at ``at`` (when the back end's retention may have
        deleted it: the gateway then forgets it too)."""

    @abstractmethod
    def due_forgets(self, now: float, limit: int = 100) -> list[str]:
        """Runs to look at again by ``now``, soonest first."""

    @abstractmethod
    def forget_run(self, run_id: str) -> None:
        """Drop what is kept of the run: its owner, cost, idempotency key, place in its
        tenant's list, summary and webhook deliveries."""

    @abstractmethod
    def add_artifacts(self, tenant: str, keys: Iterable[str], run_id: str) -> None:
        """The tenant may read ``keys``: its run ``run_id`` made them. They stay readable while
        some run of the tenant that made them is recorded (:meth:`forget_run` drops a run's)."""

    @abstractmethod
    def has_artifact(self, tenant: str, key: str) -> bool: ...

    @abstractmethod
    def put_webhook(self, job: WebhookJob) -> None:
        """Store ``job`` (replacing the one of its ``webhook_id``); due at ``next_at`` while
        pending."""

    @abstractmethod
    def webhook(self, webhook_id: str) -> WebhookJob | None: ...

    @abstractmethod
    def due_webhooks(self, now: float, limit: int = 100) -> list[WebhookJob]:
        """Pending jobs whose ``next_at`` has come, soonest first."""

    @abstractmethod
    def set_webhook_secret(self, tenant: str, secret: str) -> None: ...

    @abstractmethod
    def webhook_secret(self, tenant: str) -> str | None:
        """The secret the tenant's deliveries are signed with (``None``: none made yet)."""

    @abstractmethod
    def ping(self) -> None:
        """Raise ``StoreError`` if the store cannot be reached."""

    def close(self) -> None:
        """Release connections."""
