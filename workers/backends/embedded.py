"""Embedded mode: the whole worker pool in this process, no server.

Dramatiq's StubBroker with a real Dramatiq ``Worker`` (threads), the SQLite state store and a
local artifact directory under ``home``. The code paths are the ones the Redis pool runs; only
the seams differ. ``Client.local()`` uses :class:`EmbeddedBackend`.
"""

from __future__ import annotations

import os
from pathlib import Path

from genloop.evaluators import EvaluatorRegistry
from genloop.sdk.errors import GenloopError

from ..artifacts.local import LocalArtifactStore
from ..models.models_config import ModelsConfig, config_problems, models_config, refuse
from ..models.resources import Resources
from ..ops import OpRegistry, default_registry
from ..ops.refine import RefinerRegistry
from ..pool.broker import DEFAULT_QUEUES, wire
from ..stores.retention import configured_retention
from ..stores.sqlite import SqliteStateStore
from .quiet_worker import QuietStubBroker, QuietWorker
from .store_backend import StoreBackend


class EmbeddedRuntime:
    """Store, artifacts, broker and worker threads for one home directory.

    ``threads=0`` gives a read-only view (no worker, no sweeper): for following a run that
    another process is executing.
    """

    def __init__(
        self,
        home: str | os.PathLike[str],
        *,
        threads: int = 4,
        registry: OpRegistry | None = None,
        resources: Resources | None = None,
        lease_ttl: float = 30.0,
        sweep_every: float = 5.0,
        models: str | os.PathLike[str] | ModelsConfig | None = None,
        evaluators: EvaluatorRegistry | None = None,
        refiners: RefinerRegistry | None = None,
        fair_window: int | None = None,
        retention: float | None = None,
    ) -> None:
        """``registry``: the ops this runtime runs (default: :data:`..ops.default_registry`,
        where ``@op`` registers, with the built-ins).
        ``models``: the operator's models config (a file or a config); with one, only the
        built-in and configured model names load. ``evaluators`` and ``refiners``: the
        registries of the score and refine ops (default: where ``@evaluator`` and ``@refiner``
        register). These three go to the :class:`Resources` built here: with ``resources``
        given, pass them to it instead.
        ``fair_window``: tenants take turns, at most this many messages per queue in the
        broker (see :mod:`~genloop.workers.pool.fair_queue`; ``genloop serve --local`` uses it).
        ``retention``: seconds a finished run is kept (default: ``GENLOOP_RETENTION``, else a
        week; see :mod:`~genloop.workers.stores.retention`)."""
        if resources is not None and (models, evaluators, refiners) != (None, None, None):
            raise GenloopError("give models, evaluators and refiners to your Resources, not "
                               "beside it: Resources(allowed=..., evaluators=..., refiners=...)")
        config = None if models is None else models_config(models)
        resources = resources if resources is not None else Resources(
            allowed=config, evaluators=evaluators, refiners=refiners)
        # What a worker checks as it starts: this runtime is one. Without worker threads it
        # only submits, and reads the folders alone (no torch, no judge built)
        refuse(resources.config_problems() if threads > 0
               else config_problems(config) if config is not None else [])
        self.home = Path(home)
        self.store = SqliteStateStore(
            self.home / "state.db",
            retention=configured_retention() if retention is None else retention)
        self.artifacts = LocalArtifactStore(self.home / "artifacts")
        self.registry = registry if registry is not None else default_registry
        self.resources = resources
        self.broker = QuietStubBroker()
        self.broker.emit_after("process_boot")
        self.wiring = wire(
            self.broker, self.store, self.artifacts, self.registry,
            queues=DEFAULT_QUEUES, resources=self.resources, lease_ttl=lease_ttl,
            sweep_every=sweep_every, fair_window=fair_window,
        )
        self.scheduler = self.wiring.scheduler
        self.worker: QuietWorker | None = None
        if threads > 0:
            self.worker = QuietWorker(self.broker, worker_threads=threads)
            self.worker.start()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.wiring.executor.close()
        self.broker.close()
        self.store.close()


class EmbeddedBackend(StoreBackend):
    """``Client.local()``'s back end: calls the embedded runtime directly."""

    def __init__(self, home: str | os.PathLike[str], *, default_model: str | None = None,
                 default_evaluator: str | None = None, **options) -> None:
        self.runtime = EmbeddedRuntime(home, **options)
        resources = self.runtime.resources
        super().__init__(self.runtime.scheduler, self.runtime.artifacts,
                         models=resources.served_models,
                         cache_modes=resources.served_cache_modes,
                         evaluators=resources.evaluators, refiners=resources.refiners,
                         default_model=default_model, default_evaluator=default_evaluator)

    def close(self) -> None:
        self.runtime.close()
