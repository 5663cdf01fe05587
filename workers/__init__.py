"""genloop workers: the runtime that executes graphs on Dramatiq.

Register custom ops with :func:`op`; raise :class:`Permanent` for failures a retry cannot fix
and :class:`Transient` for ones it can.
"""

from genloop.sdk.errors import Cancelled, Permanent, Transient

from .context import OpContext
from .ops import OpRegistry, OpSpec, default_registry, op, refiner

__all__ = [
    "Cancelled",
    "OpContext",
    "OpRegistry",
    "OpSpec",
    "Permanent",
    "Transient",
    "default_registry",
    "op",
    "refiner",
]
