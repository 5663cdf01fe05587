"""A worker process's long-lived objects: models and evaluators, loaded once, shared by threads."""

from __future__ import annotations

from functools import cached_property
from typing import Any


class Resources:
    """Handed to every op through ``ctx.resources``. Nothing is loaded until first asked for."""

    def __init__(self, device: str | None = None, models: Any = None,
                 image_cache_size: int = 512) -> None:
        from genloop.evaluators import ScoreBatcher

        from .image_cache import ImageCache

        self.device = device
        if models is not None:
            self.models = models
        #: Merges this process's score requests per evaluator (see genloop.evaluators.batcher).
        self.scoring = ScoreBatcher()
        #: Images generated in this process, by artifact key (see :mod:`.image_cache`).
        self.images = ImageCache(image_cache_size)

    @cached_property
    def models(self):
        """The :class:`~genloop.workers.engine.registry.ModelRegistry` of this process."""
        from .engine.registry import ModelRegistry

        return ModelRegistry(device=self.device)

    def evaluator(self, name: str):
        """The evaluator registered as ``name`` (loaded once per process)."""
        from genloop.evaluators import get_evaluator

        return get_evaluator(name, device=self.device)
