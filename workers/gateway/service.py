"""The gateway's logic, without HTTP: tenants, ownership, limits and idempotency over a Backend.

Any :class:`~genloop.sdk.backend.Backend` will do (embedded, Redis). Ownership lives in the
:class:`~.store.GatewayStore`; a run or artifact of another tenant is ``NotFound``, exactly like
one that does not exist, so ids leak nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from genloop.sdk.backend import Backend
from genloop.sdk.errors import NotFound
from genloop.sdk.models import Event, RunInfo, RunResult, RunSpec
from genloop.sdk.ops import RefineAnswer

from .limits import TenantLimits, check_candidates, check_concurrency
from .store import GatewayStore

log = logging.getLogger(__name__)

_ARTIFACT_KEY = re.compile(r"^[0-9a-f]{64}\.[a-z0-9]{1,8}$")


def scoped_key(tenant: str, key: str) -> str:
    """The back end's idempotency key for a tenant's key: two tenants never share a run (or
    learn of each other's runs through a 409) because they happened to pick the same key."""
    return "gw-" + hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()


def artifact_keys(value: Any) -> Iterator[str]:
    """Every artifact key in a result's items (any op's output, not only candidates)."""
    if isinstance(value, str):
        if _ARTIFACT_KEY.match(value):
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from artifact_keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from artifact_keys(item)


class Gateway:
    """What each route calls, with the caller's tenant."""

    def __init__(self, backend: Backend, store: GatewayStore,
                 defaults: TenantLimits | None = None) -> None:
        self.backend = backend
        self.store = store
        self.defaults = defaults or TenantLimits()
        # Count-then-submit must not interleave for one tenant, or two requests could both
        # pass the concurrency check. One lock per tenant, in this process; several gateway
        # processes on one Redis can overshoot by at most one run each.
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

    def limits(self, tenant: str) -> TenantLimits:
        return self.store.limits(tenant) or self.defaults

    def submit(self, tenant: str, spec: RunSpec, key: str | None) -> tuple[RunInfo, bool]:
        """Start a run for ``tenant``; ``(info, created)``, ``created`` false for a replay."""
        limits = self.limits(tenant)
        backend_key = scoped_key(tenant, key) if key is not None else None
        with self._locks[tenant]:
            # A retried POST whose run exists is answered with that run (or 409 if the body
            # differs) even when the tenant is at its limit: that run is the one counted.
            if backend_key is None or self.store.run_for_key(backend_key) is None:
                check_candidates(spec, limits)
                check_concurrency(self._count_open(tenant), limits)
            info = self.backend.submit(spec, backend_key)
            created = self.store.add_run(info.id, tenant, backend_key)
        if not created and self.store.owner(info.id) != tenant:  # pragma: no cover - defensive
            raise NotFound(f"no run {info.id!r}")
        log.info("run %s %s for tenant %s", info.id, "submitted" if created else "replayed",
                 tenant)
        return info, created

    def _count_open(self, tenant: str) -> int:
        count = 0
        for run_id in self.store.open_runs(tenant):
            try:
                ended = self.backend.get(run_id).status.terminal
            except NotFound:
                ended = True
            if ended:
                self.store.mark_ended(run_id)
            else:
                count += 1
        return count

    def _own(self, tenant: str, run_id: str) -> None:
        if self.store.owner(run_id) != tenant:
            raise NotFound(f"no run {run_id!r}")

    def get(self, tenant: str, run_id: str) -> RunInfo:
        self._own(tenant, run_id)
        return self.backend.get(run_id)

    def result(self, tenant: str, run_id: str) -> RunResult:
        self._own(tenant, run_id)
        result = self.backend.result(run_id)
        self._index(tenant, run_id, result)
        return result

    def events(self, tenant: str, run_id: str, after: int, limit: int) -> list[Event]:
        self._own(tenant, run_id)
        return self.backend.events(run_id, after=after, limit=limit)

    def cancel(self, tenant: str, run_id: str) -> RunInfo:
        self._own(tenant, run_id)
        return self.backend.cancel(run_id)

    def resume(self, tenant: str, run_id: str) -> RunInfo:
        self._own(tenant, run_id)
        return self.backend.resume(run_id)

    def refine(self, tenant: str, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        """Answer the tenant's waiting refine; images it edits must be the tenant's own."""
        self._own(tenant, run_id)
        for r in answer.requests:
            for key in (r.init_image, r.mask):
                if key is not None:
                    self.artifact(tenant, key)  # NotFound for another tenant's image
        return self.backend.refine(run_id, answer)

    def artifact(self, tenant: str, key: str) -> bytes:
        """The bytes of ``key`` if it appears in a result of one of the tenant's runs."""
        if not self.store.has_artifact(tenant, key):
            # Results a client has not fetched through the gateway are indexed on demand.
            for run_id in self.store.unindexed_runs(tenant):
                self._index(tenant, run_id, self.backend.result(run_id))
            if not self.store.has_artifact(tenant, key):
                raise NotFound(f"no artifact {key!r}")
        return self.backend.read_artifact(key)

    def _index(self, tenant: str, run_id: str, result: RunResult) -> None:
        outputs = [out.items for out in result.outputs.values()]
        self.store.add_artifacts(tenant, set(artifact_keys(outputs)))
        if result.status.terminal:
            self.store.mark_indexed(run_id)

    def ping(self) -> None:
        self.store.ping()
        self.backend.ping()
