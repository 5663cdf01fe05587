"""The weights a ``composite`` or an ``ensemble`` takes, checked without loading a model: by the
evaluator when it is built, and by the gateway's admission when a tenant's spec names one, so
that bad weights are refused at submit rather than after the images are drawn."""

from __future__ import annotations

import math
from collections.abc import Mapping

from genloop.sdk.errors import Permanent

#: Whether a whole's weights may be negative: a composite's are the caller's trade-off between
#: scores, an ensemble's are learned and may count a part against.
SIGNED = {"composite": False, "ensemble": True}


def counts(kind: str, weight: float) -> bool:
    """Whether a part of ``weight`` changes a ``kind``'s score; the parts of the others are
    never built (nor priced). A composite's negative weight is refused before this is asked."""
    return weight != 0 if SIGNED[kind] else weight > 0


def finite_number(value: object) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value))


def check_weights(kind: str, weights: Mapping[str, object], *, count: int,
                  bias: object = 0.0) -> None:
    """Weights (and an ensemble's bias) must be finite numbers, a composite's not negative,
    not all of them zero; ``count`` is how many parts were given, so a name given twice is
    caught."""
    if count == 0:
        raise Permanent(f"{kind} needs at least one weighted evaluator")
    if len(weights) != count:
        raise Permanent(f"{kind} lists the same evaluator twice; give each one weight")
    for what, value in [*((f"weight of {n!r}", w) for n, w in weights.items()), ("bias", bias)]:
        if not finite_number(value):
            raise Permanent(f"{what} must be a finite number, got {value!r}")
    if not SIGNED[kind]:
        for name, weight in weights.items():
            if weight < 0:  # type: ignore[operator]
                raise Permanent(f"weight of {name!r} is {weight}; weights must be >= 0")
    if not any(weights.values()):
        raise Permanent(f"all {kind} weights are zero; at least one must "
                        f"{'not be' if SIGNED[kind] else 'be positive'}")
