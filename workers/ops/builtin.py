"""The built-in ops: generate, score, select and refine.

Their modules only declare them (an :class:`~.registry.OpSpec` each); :func:`with_builtins` is
the one place they are registered, and ``genloop.workers.ops`` calls it once for the default
registry. A registry of one's own (``OpRegistry()``) holds only what is registered in it.
"""

from __future__ import annotations

from .generate import GENERATE
from .refine import REFINE
from .registry import OpRegistry, OpSpec
from .score import SCORE
from .select import SELECT

BUILTIN_OPS: tuple[OpSpec, ...] = (GENERATE, SCORE, SELECT, REFINE)


def with_builtins(registry: OpRegistry) -> OpRegistry:
    """``registry`` with the built-in ops registered in it (again: a no-op)."""
    for spec in BUILTIN_OPS:
        registry.register(spec)
    return registry
