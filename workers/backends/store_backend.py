"""A :class:`~genloop.sdk.backend.Backend` over a scheduler, a state store and an artifact
store: what the embedded runtime and the Redis pool share. Only how they are built differs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from genloop.sdk.backend import Backend
from genloop.sdk.errors import GraphError, GraphProblem
from genloop.sdk.graph import Graph
from genloop.sdk.loop import Loop
from genloop.sdk.models import Event, RunInfo, RunPage, RunQuery, RunResult, RunSpec
from genloop.sdk.ops import RefineAnswer
from genloop.sdk.schema import Served, SpecSchema, spec_schema

from ..artifacts.base import ArtifactStore
from ..runtime.admission import admit
from ..runtime.scheduler import Scheduler
from .results import list_runs, run_info, run_result
from .served import served

if TYPE_CHECKING:
    from genloop.evaluators import EvaluatorRegistry

    from ..ops.refine import RefinerRegistry
    from ..pool.pool_status import PoolStatus  # imports redis, which Client.local never needs
    from .catalogue import PublishedEvaluators

_SPEC: TypeAdapter[Any] = TypeAdapter(RunSpec)


class StoreBackend(Backend):
    """Calls the scheduler and reads the stores directly, in this process.

    ``models`` returns the model names this back end serves and their descriptions (called
    when they are asked for: the model registry's built-ins, or what a pool's workers
    published); ``evaluators`` and ``refiners`` are the registries whose names it serves;
    ``default_model`` / ``default_evaluator`` are the
    operator's defaults for specs that name none (see :mod:`.served`); ``cache_modes`` returns
    the step cache modes of each model whose architecture is known here, refused otherwise.
    """

    def __init__(self, scheduler: Scheduler, artifacts: ArtifactStore, *,
                 models: Callable[[], dict[str, str]],
                 evaluators: EvaluatorRegistry | PublishedEvaluators,
                 refiners: RefinerRegistry, default_model: str | None = None,
                 default_evaluator: str | None = None,
                 cache_modes: Callable[[], dict[str, list[str]]] = dict) -> None:
        self.scheduler = scheduler
        self.store = scheduler.store
        self.artifacts = artifacts
        self._models = models
        self._cache_modes = cache_modes
        self.evaluators = evaluators
        self.refiners = refiners
        self.default_model = default_model
        self.default_evaluator = default_evaluator
        self._schema: tuple[object, SpecSchema] | None = None

    def pool_status(self) -> PoolStatus | None:
        """The worker pool's workers and backlog; ``None`` here: not a pool (the Redis back
        end's says)."""
        return None

    def served(self) -> Served:
        return served(self.scheduler.registry, self._models(), self.evaluators, self.refiners,
                      self.default_model, self.default_evaluator, self._cache_modes())

    def schema(self) -> SpecSchema:
        """The spec schema, built again only when what is served changed (an op registered,
        a pool's workers publishing other models): building it generates pydantic's JSON
        Schema of every model involved, 25-60 ms a call, and agents ask for it often."""
        offer, params = self.served(), self.scheduler.registry.catalogue()
        key = (offer.model_dump_json(), frozenset(params.items()))
        cached = self._schema
        if cached is None or cached[0] != key:
            cached = self._schema = (key, spec_schema(offer, params))
        return cached[1].model_copy(deep=True)  # the caller's to change

    def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo:
        offer = self.served()
        spec = _SPEC.validate_python(spec)
        if spec.webhook is not None:  # nothing here would ever deliver it
            raise GraphError([GraphProblem(
                node_id=None, path="webhook", message="webhooks are delivered by a gateway "
                "(genloop serve); this back end has none: follow the run's events instead")])
        # one check, every problem at once (see runtime.admission); filled and compiled once
        admitted = admit(spec, offer, self.scheduler.registry, self.scheduler.queues)
        return self.submit_admitted(admitted.spec, admitted.graph, idempotency_key)

    def submit_admitted(self, spec: Graph | Loop, graph: Graph,
                        idempotency_key: str | None) -> RunInfo:
        """Store and start a spec its caller admitted (a gateway's admission, which checks all
        :meth:`submit` does against a tenant's narrower offer): ``graph`` is ``spec`` compiled,
        defaults filled in (see :meth:`Scheduler.start`)."""
        run = self.scheduler.start(spec, graph, idempotency_key)  # IdempotencyConflict: a 409
        return run_info(self.store, run.id)

    def get(self, run_id: str) -> RunInfo:
        return run_info(self.store, run_id)

    def runs(self, query: RunQuery) -> RunPage:
        return list_runs(self.store, query)

    def result(self, run_id: str) -> RunResult:
        return run_result(self.store, run_id)

    @contextmanager
    def _pauses(self, run_id: str) -> Iterator[Callable[[float], object]]:
        """Pauses on the store's watch of the run's end (``stores/run_ends.py``): ``wait`` and
        ``follow`` return the moment the run ends; the pause still bounds each sleep, the
        fallback should a wake-up be lost."""
        with self.store.watch_end(run_id) as watch:
            yield watch.wait

    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        self.store.get_run(run_id)  # NotFound for an unknown run
        return self.store.events(run_id, after, limit)

    def cancel(self, run_id: str) -> RunInfo:
        self.scheduler.cancel(run_id)
        return run_info(self.store, run_id)

    def resume(self, run_id: str) -> RunInfo:
        self.scheduler.resume(run_id)
        return run_info(self.store, run_id)

    def pin(self, run_id: str, pinned: bool) -> RunInfo:
        self.store.pin(run_id, pinned)
        return run_info(self.store, run_id)

    def read_artifact(self, key: str) -> bytes:
        return self.artifacts.get(key)

    def write_artifact(self, data: bytes, ext: str) -> str:
        return self.artifacts.put(data, ext)

    def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        from ..runtime.agent_refine import answer as give

        return give(self.store, run_id, answer, self.scheduler.registry)
