"""A worker process's long-lived objects: models and evaluators, loaded once, shared by threads."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from .models_config import ModelsConfig


class Resources:
    """Handed to every op through ``ctx.resources``. Nothing is loaded until first asked for."""

    def __init__(self, device: str | None = None, models: Any = None,
                 allowed: ModelsConfig | None = None) -> None:
        """``models`` replaces the registry outright; ``allowed`` is the operator's models
        config for the registry built here (``None``: trusted code, any local path loads)."""
        self.device = device
        self.allowed = allowed
        if models is not None:
            self.models = models

    @cached_property
    def models(self):
        """The :class:`~genloop.workers.engine.registry.ModelRegistry` of this process."""
        from .engine.registry import ModelRegistry

        return ModelRegistry(device=self.device, models=self.allowed)

    def evaluator(self, name: str):
        """The evaluator registered as ``name`` (loaded once per process)."""
        from genloop.evaluators import get_evaluator

        return get_evaluator(name, device=self.device)
