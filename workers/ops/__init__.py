"""Ops: the registry and the built-in ops (importing this package registers them)."""

from . import generate, refine, score, select  # noqa: F401  (registration side effect)
from .refine import refiner
from .registry import OpRegistry, OpSpec, default_registry, op

__all__ = ["OpRegistry", "OpSpec", "default_registry", "op", "refiner"]
