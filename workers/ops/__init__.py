"""Ops: the registry and the built-in ops (importing this package registers them)."""

from . import generate, refine, score, select  # noqa: F401  (registration side effect)
from .refine import RefinerRegistry, default_refiners, refiner
from .registry import OpRegistry, OpSpec, default_registry, op

__all__ = ["OpRegistry", "OpSpec", "RefinerRegistry", "default_refiners", "default_registry",
           "op", "refiner"]
