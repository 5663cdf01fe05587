"""Which judges a tenant sees in ``/v1/schema`` and may name at submit.

A tenant's spec is data, never a path (:mod:`genloop.evaluators.options`), so a judge that
needs an option only trusted code may give (``hf-clip``'s ``path``, ``aesthetic``'s ``head``)
or an operator's setting not made (``vlm-judge`` without its server) can never work for a
tenant: it is neither listed nor accepted. A judge whose needs a tenant may meet
(``brand-palette``'s palette) is, and so is an operator's own judge from the models config,
which needs nothing. The tenant's allow-list (``TenantLimits.evaluators``) narrows further.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from genloop.evaluators.options import TENANT_OPTIONS
from genloop.sdk.backend import Backend
from genloop.sdk.schema import Named, Served, SpecSchema, spec_schema
from genloop.workers.backends.store_backend import StoreBackend
from genloop.workers.ops.registry import OpRegistry


def usable(judge: Named) -> bool:
    """Whether a tenant can meet everything ``judge`` needs."""
    return set(judge.needs) <= TENANT_OPTIONS.get(judge.name, frozenset())


def tenant_judges(served: Served, allowed: list[str] | None = None) -> list[Named]:
    """The judges of ``served`` a tenant (allowed ``allowed``; ``None``: all) can use."""
    return [j for j in served.evaluators
            if usable(j) and (allowed is None or j.name in allowed)]


def backend_served(backend: Backend) -> Callable[[], Served]:
    """What ``backend`` serves, read each time admission asks: a pool's workers publish their
    judges as they start. A store back end's ``served()`` takes 0.25 ms here against 1.8 ms
    for the schema, which it copies."""
    if isinstance(backend, StoreBackend):
        return backend.served
    return lambda: backend.schema().served


class TenantSchemas:
    """The back end's spec schema with only a tenant's judges in it. Building a schema takes
    25-60 ms, so each distinct narrowing is built once."""

    def __init__(self, backend: Backend, ops: OpRegistry) -> None:
        self.backend, self.ops = backend, ops

    def schema(self, allowed: list[str] | None) -> SpecSchema:
        full = self.backend.schema()
        judges = tenant_judges(full.served, allowed)
        if judges == full.served.evaluators:
            return full
        narrowed = full.served.model_copy(update={"evaluators": judges})
        return self._build(narrowed.model_dump_json()).model_copy(deep=True)

    @functools.lru_cache(maxsize=32)  # noqa: B019  (one per gateway, lives as long)
    def _build(self, served: str) -> SpecSchema:
        return spec_schema(Served.model_validate_json(served), self.ops.catalogue())
