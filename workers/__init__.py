"""genloop workers: the runtime that executes graphs on Dramatiq.

Register custom ops with :func:`op` (and refine strategies with :func:`refiner`) in the default
registries, or give a runtime registries of its own (``Client.local(registry=..., refiners=...)``,
``evaluators=...``); raise :class:`Permanent` for failures a retry cannot fix
and :class:`Transient` for ones it can. An op that hands its work to a batched resource returns
a :class:`Deferred` instead of waiting for it (see :mod:`genloop.workers.runtime.deferred`).
"""

from genloop.sdk.errors import Cancelled, Permanent, Transient

from .ops import (
    OpRegistry,
    OpSpec,
    RefinerRegistry,
    default_refiners,
    default_registry,
    op,
    refiner,
)
from .runtime.context import OpContext
from .runtime.deferred import Deferred

__all__ = [
    "Cancelled",
    "Deferred",
    "OpContext",
    "OpRegistry",
    "OpSpec",
    "Permanent",
    "RefinerRegistry",
    "Transient",
    "default_refiners",
    "default_registry",
    "op",
    "refiner",
]


if __name__ != "genloop.workers":  # imported as a bare `workers` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
