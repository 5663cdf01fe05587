"""A worker process's long-lived objects: models and evaluators, loaded once, shared by threads."""

from __future__ import annotations

import threading
from typing import Any

from .models_config import ModelsConfig


class Resources:
    """Handed to every op through ``ctx.resources``. Nothing is loaded until first asked for.

    Worker threads ask for the models at once when a worker starts; building the registry under
    a lock keeps that to one registry (``functools.cached_property`` has no lock since Python
    3.12, so two threads would each build one, and each load the models onto the GPU).
    """

    def __init__(self, device: str | None = None, models: Any = None,
                 allowed: ModelsConfig | None = None, image_cache_size: int = 512,
                 torch_threads: int | None = None) -> None:
        """``models`` replaces the registry outright; ``allowed`` is the operator's models
        config for the registry built here (``None``: trusted code, any local path loads).
        ``torch_threads``: torch's intra-op threads, set when a model or evaluator is first
        used (default: fitted to the machine, see :mod:`.threads`; 0: torch's own)."""
        self.device = device
        self.torch_threads = torch_threads
        self._fitted = False
        self.allowed = allowed
        self._models = models
        self._lock = threading.Lock()
        from genloop.evaluators import ScoreBatcher

        from .image_cache import ImageCache

        #: Merges this process's score requests per evaluator (see genloop.evaluators.batcher).
        self.scoring = ScoreBatcher()
        #: Images generated in this process, by artifact key (see :mod:`.image_cache`).
        self.images = ImageCache(image_cache_size)

    @property
    def models(self):
        """The :class:`~genloop.workers.engine.registry.ModelRegistry` of this process."""
        with self._lock:
            self._fit_threads()
            if self._models is None:
                from .engine.registry import ModelRegistry

                self._models = ModelRegistry(device=self.device, models=self.allowed)
            return self._models

    def evaluator(self, name: str):
        """The evaluator registered as ``name`` (loaded once per process)."""
        from genloop.evaluators import get_evaluator

        with self._lock:
            self._fit_threads()
        return get_evaluator(name, device=self.device)

    def _fit_threads(self) -> None:
        if not self._fitted:
            from .threads import fit_torch_threads

            self.torch_threads = fit_torch_threads(self.torch_threads)
            self._fitted = True
