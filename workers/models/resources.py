"""A worker process's long-lived objects: models and evaluators, loaded once, shared by threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .models_config import ModelsConfig

if TYPE_CHECKING:
    from genloop.evaluators import EvaluatorRegistry

    from ..ops.refine import RefinerRegistry


class Resources:
    """Handed to every op through ``ctx.resources``. Nothing is loaded until first asked for.

    Worker threads ask for the models at once when a worker starts; building the registry under
    a lock keeps that to one registry (``functools.cached_property`` has no lock since Python
    3.12, so two threads would each build one, and each load the models onto the GPU).
    """

    def __init__(self, device: str | None = None, models: Any = None,
                 allowed: ModelsConfig | None = None, image_cache_size: int = 512, *,
                 evaluators: EvaluatorRegistry | None = None,
                 refiners: RefinerRegistry | None = None,
                 torch_threads: int | None = None) -> None:
        """``models`` replaces the registry outright; ``allowed`` is the operator's models
        config for the registry built here (``None``: trusted code, any local path loads).
        ``evaluators`` and ``refiners`` are the registries the score and refine ops use
        (default: :data:`genloop.evaluators.default_registry`,
        :data:`..ops.refine.default_refiners`, where ``@evaluator`` and ``@refiner`` register).
        ``torch_threads``: torch's intra-op threads, set when a model or evaluator is first used
        (default: fitted to the machine, see :mod:`.threads`; 0: torch's own)."""
        from genloop.evaluators import ScoreBatcher, default_registry

        from ..ops.refine import default_refiners
        from .image_cache import ImageCache

        self.device = device
        self.torch_threads = torch_threads
        self._engine_threads: int | None = None
        self._fitted = False
        self.allowed = allowed
        self._models = models
        self._cache_modes: dict[str, list[str]] | None = None
        self._builtin_identities: dict[str, str] | None = None
        self._lock = threading.Lock()
        #: Evaluators by name (see :meth:`evaluator`).
        self.evaluators = evaluators if evaluators is not None else default_registry
        #: Refine strategies by name, for the refine op.
        self.refiners = refiners if refiners is not None else default_refiners
        if allowed is not None:  # the operator's own judges become names of the registry
            from genloop.evaluators.config import register_judges

            register_judges(self.evaluators, allowed.evaluators)

        #: Merges this process's score requests per evaluator (see genloop.evaluators.batcher).
        self.scoring = ScoreBatcher()
        #: Images generated in this process, by artifact key (see :mod:`.image_cache`).
        self.images = ImageCache(image_cache_size)
        #: The models other workers of a pool hold, which eviction takes first (a pool
        #: worker sets it; none elsewhere): see :mod:`..engine.residency`.
        self.held_elsewhere: Callable[[], set[str]] = set

    @property
    def models(self):
        """The :class:`~genloop.workers.engine.registry.ModelRegistry` of this process."""
        with self._lock:
            self._fit_threads()
            if self._models is None:
                from ..engine.registry import ModelRegistry

                self._models = ModelRegistry(device=self.device, models=self.allowed,
                                             batch_threads=self._engine_threads)
                self._models.residency.spare = lambda: self.held_elsewhere()
            return self._models

    def model_identity(self, name: str) -> str:
        """The identity of model ``name`` for result keys, without building the registry when
        nothing has yet (it imports torch: seconds): an executor keys an instance before any
        work, and a stored result, or a claim taken while torch loads, needs no model. Names
        registered by code exist only once the registry does, which then answers."""
        from .model_identity import builtin_identities, model_identity

        registry = self._models
        if registry is not None:
            return registry.identity(name)
        if self._builtin_identities is None:
            self._builtin_identities = builtin_identities()
        return model_identity(name, self.allowed, self._builtin_identities)

    def served_models(self) -> dict[str, str]:
        """The model names specs may use here (name -> description), without building the
        registry when nothing has yet: a back end lists them for its spec schema, and importing
        diffusers for that took seconds."""
        from .models_config import builtin_models, served_models

        registry = self._models
        if registry is None:
            return served_models(builtin_models(), self.allowed)
        return served_models(registry.builtin(), registry.models)

    def served_cache_modes(self) -> dict[str, list[str]]:
        """The cache modes each configured model runs, where its folder tells its
        architecture (:func:`~.capabilities.model_cache_modes`); read from files, no load,
        once (a back end lists them at every submit; the config is the process's)."""
        from .capabilities import model_cache_modes

        if self._cache_modes is None:
            self._cache_modes = model_cache_modes(self.allowed)
        return dict(self._cache_modes)

    def config_problems(self) -> list[str]:
        """Why the operator's models and judges cannot all be served here, one line each with
        its path (empty without a config). Builds the model registry and each judge: a worker
        runs it as it starts and refuses to start on any problem. A config without models to
        load (the built-ins alone, or simulated ones) is checked from its files: the registry's
        own checks are per loaded model, and building it imports torch and diffusers (2.7 s of
        a bare worker's 4.3 s start on 2 cores), which the first generate pays instead."""
        if self.allowed is None:
            return []
        from genloop.evaluators.config import judge_problems

        from .capabilities import cache_problems
        from .models_config import config_problems

        loaded = any(e.simulated is None for e in self.allowed.models.values())
        return ((self.models.config_problems() if loaded else config_problems(self.allowed))
                + cache_problems(self.allowed)
                + judge_problems(self.evaluators, self.allowed.evaluators))

    def state(self) -> dict[str, Any]:
        """What this process holds, for its presence in the pool (:mod:`..pool.pool_status`):
        resident models, the loads so far, its engine's running batch, queued images and batch
        limit, each model's measured seconds per image step and default steps. Builds
        nothing."""
        registry = self._models
        if registry is None:
            return {}
        engine = registry.started_engine
        load = engine.load() if engine is not None else {"running": None, "queued": {},
                                                          "batch_limit": None}
        measured = dict(engine.step_seconds) if engine is not None else {}
        measured_on = dict(engine.step_images) if engine is not None else {}
        resident = registry.resident()
        return {"resident": resident, "loads": dict(registry.loads),
                "load_seconds": dict(registry.load_seconds), "running": load["running"],
                "queued_images": load["queued"], "batch_limit": load["batch_limit"],
                "step_seconds": measured, "step_images": measured_on,
                "default_steps": {name: registry.defaults(name).steps
                                  for name in {*resident, *measured}}}

    def evaluator(self, name: str, options: dict[str, Any] | None = None):
        """The evaluator registered as ``name`` in :attr:`evaluators`, built with ``options``
        (loaded once per process for each distinct set of options)."""
        from genloop.sdk.errors import Permanent

        with self._lock:
            self._fit_threads()
        try:
            return self.evaluators.get(name, device=self.device, **(options or {}))
        except TypeError as exc:  # a factory given options it does not take
            if not options:
                raise
            raise Permanent(f"evaluator {name!r} does not take options {sorted(options)}: "
                            f"{exc}") from exc

    def _fit_threads(self) -> None:
        """Set the process's torch threads and, unless they were pinned (``torch_threads``,
        ``GENLOOP_TORCH_THREADS``), the model threads' own (see :mod:`.threads`)."""
        if not self._fitted:
            from .threads import (
                ENV_TORCH_THREADS,
                SCORER_THREADS,
                engine_threads,
                fit_torch_threads,
            )

            pinned = self.torch_threads is not None or os.environ.get(ENV_TORCH_THREADS, "")
            self.torch_threads = fit_torch_threads(self.torch_threads)
            if not pinned:
                self._engine_threads = engine_threads()
                self.scoring.torch_threads = SCORER_THREADS
            self._fitted = True
