"""Ops: the registry, and the built-in ops, which the default registry holds."""

from .builtin import BUILTIN_OPS, with_builtins
from .refine import RefinerRegistry, default_refiners, refiner
from .registry import OpRegistry, OpSpec, default_registry, op

# The default registry is where ``@op`` registers users' ops and what a runtime runs unless it
# is given another: it starts with the built-ins.
with_builtins(default_registry)

__all__ = ["BUILTIN_OPS", "OpRegistry", "OpSpec", "RefinerRegistry", "default_refiners",
           "default_registry", "op", "refiner", "with_builtins"]
