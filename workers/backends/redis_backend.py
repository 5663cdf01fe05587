"""``Client.connect(redis_url)``'s back end: submit to, and follow, a Redis worker pool.

The submitting process runs no op: it validates, plans and enqueues (Dramatiq's RedisBroker),
then reads the shared Redis store. It declares no actor and builds no executor or worker
middleware (:func:`~..pool.broker.submitter`), and imports neither torch nor any model code.
"""

from __future__ import annotations

import redis
from dramatiq.brokers.redis import RedisBroker

from genloop.evaluators import EvaluatorRegistry
from genloop.evaluators import default_registry as default_evaluators
from genloop.sdk.errors import ClientError, GenloopError
from genloop.sdk.models import RunInfo

from ..artifacts import open_artifact_store
from ..ops import OpRegistry, default_registry
from ..ops.refine import RefinerRegistry, default_refiners
from ..pool.broker import DEFAULT_QUEUES, submitter
from ..pool.pool_status import PoolStatus, RecentWorkers, pool_status, waiting_for
from ..runtime.transitions import new_event
from ..stores.redis import RedisStateStore
from ..stores.retention import configured_retention
from .catalogue import (
    PublishedEvaluators,
    published_artifacts,
    published_cache_modes,
    published_models,
    published_queues,
    published_retention,
    with_published,
)
from .store_backend import StoreBackend


class RedisBackend(StoreBackend):
    """Talks to the pool through Redis alone. ``artifacts`` defaults to what the workers use."""

    def __init__(self, url: str, artifacts: str | None = None, *, prefix: str = "genloop",
                 registry: OpRegistry | None = None,
                 evaluators: EvaluatorRegistry | None = None,
                 refiners: RefinerRegistry | None = None, default_model: str | None = None,
                 default_evaluator: str | None = None, fair: bool = True) -> None:
        """``registry``, ``evaluators``, ``refiners``: what this client validates specs against
        (default: where ``@op``, ``@evaluator`` and ``@refiner`` register; the ops and
        evaluators the workers published are added). ``fair``: send through the pool's fair
        queue (tenants take turns; see :mod:`~..pool.redis_fair_queue`), as the pool's own workers
        do."""
        self.client, self.prefix = redis.Redis.from_url(url), prefix
        # A run's waiting state is read with every status read (the gateway's waits and
        # streams read in loops); the presence records change every 2 s.
        self._workers = RecentWorkers(self.client, prefix)
        try:
            uri = artifacts or published_artifacts(self.client, prefix)
            # The workers' retention, so what this side schedules agrees
            retention = published_retention(self.client, prefix)
        except redis.RedisError as exc:
            raise ClientError(f"cannot reach Redis at {url}: {exc}") from exc
        if uri is None:
            raise GenloopError(
                "no artifact store: pass artifacts='file:///dir' or 's3://bucket/prefix', "
                "or start a worker (genloop worker --artifacts ...) so it publishes its own"
            )
        store = RedisStateStore(client=self.client, prefix=prefix, retention=(
            configured_retention() if retention is None else retention))
        artifact_store = open_artifact_store(uri)
        registry = with_published(self.client, registry or default_registry, prefix)
        queues = sorted(set(DEFAULT_QUEUES) | {s.queue for s in registry.values()}
                        | published_queues(self.client, prefix))
        self.broker = RedisBroker(client=self.client)
        scheduler = submitter(self.broker, store, registry, queues=queues,
                              shared_fair=prefix if fair else None)
        super().__init__(scheduler, artifact_store,
                         models=lambda: published_models(self.client, prefix),
                         cache_modes=lambda: published_cache_modes(self.client, prefix),
                         evaluators=PublishedEvaluators(self.client, evaluators if evaluators
                                                        is not None else default_evaluators,
                                                        prefix),
                         refiners=refiners if refiners is not None else default_refiners,
                         default_model=default_model, default_evaluator=default_evaluator)

    def submit(self, spec, idempotency_key: str | None) -> RunInfo:
        """As :meth:`StoreBackend.submit`; a run whose work no live worker can take says so
        in its status and in a ``run.waiting`` event."""
        info = self._with_waiting(super().submit(spec, idempotency_key))
        if info.waiting is not None:
            self.store.append_event(info.id, new_event(
                "run.waiting", message=f"waiting for {info.waiting}"))
        return info

    def get(self, run_id: str) -> RunInfo:
        return self._with_waiting(super().get(run_id))

    def _with_waiting(self, info: RunInfo) -> RunInfo:
        topology, registry = self.scheduler.topology(info.id), self.scheduler.registry

        def needs(node_id: str) -> tuple[str, str | None]:
            node = topology.nodes[node_id]
            return (registry.queue_of(node) or "cpu",
                    node.params.get("model") if node.op == "generate" else None)

        info.waiting = waiting_for(self._workers, info, needs)
        return info

    def pool_status(self) -> PoolStatus | None:
        """The pool's workers and backlog (:func:`~..pool.pool_status.pool_status`)."""
        return pool_status(self.client, self.prefix, self.store)

    def close(self) -> None:
        self.broker.close()
        self.client.close()

