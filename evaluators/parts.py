"""What evaluators made of other weighted evaluators share (``composite``, ``ensemble``): the
parts, checked and built from registry names, and the text needs, device and identity terms
that follow from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

from genloop.sdk.errors import Permanent

from .base import Evaluator
from .weights import check_weights, counts

if TYPE_CHECKING:
    from .registry import EvaluatorRegistry


class WeightedParts(Evaluator):
    """Subclasses say what they are called (``kind``, a key of :data:`.weights.SIGNED`) and give
    an example of their options; the weights (and an ensemble's bias) are checked and the parts
    whose weight changes no score left unbuilt by the rules of :mod:`.weights`."""

    kind: str
    example: str

    def __init__(self, parts: Sequence[tuple[Evaluator, float]], **extra: Any) -> None:
        check_weights(self.kind, {p.identity: w for p, w in parts}, count=len(parts), **extra)
        self.parts = [(part, float(weight)) for part, weight in parts
                      if counts(self.kind, weight)]
        self.needs_text = any(part.needs_text for part, _ in self.parts)
        devices = {part.device for part, _ in self.parts}
        self.device = devices.pop() if len(devices) == 1 else "mixed"
        self.terms = ",".join(f"{weight:g}*{part.identity}" for part, weight in self.parts)

    @classmethod
    def from_registry(
        cls,
        registry: EvaluatorRegistry,
        device: str,
        *,
        weights: Mapping[str, float] | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> Self:
        """Build from evaluator names (``weights={"clip": 1.0, ...}``); ``options[name]`` goes
        to that part's factory, and every part runs on ``device``."""
        if not weights:
            raise Permanent(f"{cls.kind} needs weights, e.g. {cls.example}")
        check_weights(cls.kind, weights, count=len(weights), **extra)
        known = set(registry.names())
        unknown = sorted(set(weights) - known)
        if unknown:
            raise Permanent(f"{cls.kind} weights name unknown evaluators {unknown}; known: "
                            f"{sorted(known)}")
        stray = sorted(set(options or {}) - set(weights))
        if stray:
            raise Permanent(f"{cls.kind} options given for {stray}, which have no weight")
        parts = [(registry.get(name, device, **dict((options or {}).get(name, {}))), weight)
                 for name, weight in weights.items() if counts(cls.kind, weight)]
        return cls(parts, **extra)
