"""A weighted sum of other evaluators, for campaigns that care about more than one thing.

``score = sum(weight[name] * evaluator[name].score)``, per image. The weights are not normalised:
the parts' scales differ (CLIP 0..100, a LAION aesthetic rating roughly 1..10), and only the
caller knows what trade-off between them is meant. Weights are checked up front, because a typo
or a negative weight would otherwise quietly rank candidates by the wrong thing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from PIL import Image

from genloop.sdk.errors import Permanent

from .base import Evaluator, Scores, check_finite

if TYPE_CHECKING:
    from .registry import EvaluatorRegistry


class CompositeEvaluator(Evaluator):
    """Sum of ``weight * part.score`` over ``parts``, given as ``(evaluator, weight)`` pairs.

    The embeddings returned are those of the first part, in the given order, that has any, so
    diverse selection after a composite score reuses (for example) the CLIP image embeddings.
    """

    def __init__(self, parts: Sequence[tuple[Evaluator, float]]) -> None:
        check_weights({p.identity: w for p, w in parts}, count=len(parts))
        # Zero-weight parts cannot change a score; leaving them out also keeps their models
        # unloaded.
        self.parts = [(part, float(weight)) for part, weight in parts if weight > 0]
        self.needs_text = any(part.needs_text for part, _ in self.parts)
        devices = {part.device for part, _ in self.parts}
        self.device = devices.pop() if len(devices) == 1 else "mixed"
        terms = ",".join(f"{weight:g}*{part.identity}" for part, weight in self.parts)
        self.identity = f"composite({terms})"

    @classmethod
    def from_registry(
        cls,
        registry: EvaluatorRegistry,
        device: str,
        *,
        weights: Mapping[str, float] | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> CompositeEvaluator:
        """Build from evaluator names: ``weights={"clip": 1.0, "aesthetic": 2.0}``.

        ``options[name]`` is passed to that part's factory (``{"aesthetic": {"head": path}}``).
        Every part runs on ``device``.
        """
        if not weights:
            raise Permanent('composite needs weights, e.g. weights={"clip": 1.0, "aesthetic": 0.5}')
        check_weights(weights, count=len(weights))
        known = set(registry.names())
        unknown = sorted(set(weights) - known)
        if unknown:
            raise Permanent(
                f"composite weights name unknown evaluators {unknown}; known: {sorted(known)}"
            )
        stray = sorted(set(options or {}) - set(weights))
        if stray:
            raise Permanent(f"composite options given for {stray}, which have no weight")
        parts = [
            (registry.get(name, device, **dict((options or {}).get(name, {}))), weight)
            for name, weight in weights.items()
            if weight > 0
        ]
        return cls(parts)

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        total = [0.0] * len(images)
        embeddings = None
        for part, weight in self.parts:
            scores = part.score(images, text)
            if len(scores.values) != len(images):
                raise Permanent(
                    f"{part.identity} returned {len(scores.values)} scores for {len(images)} images"
                )
            total = [t + weight * v for t, v in zip(total, scores.values, strict=True)]
            if embeddings is None:
                embeddings = scores.embeddings
        check_finite(total)
        return Scores(values=total, embeddings=embeddings, evaluator=self.identity)


def check_weights(weights: Mapping[str, object], *, count: int) -> None:
    """Weights must be finite, non-negative numbers, and not all zero."""
    if count == 0:
        raise Permanent("composite needs at least one weighted evaluator")
    if len(weights) != count:
        raise Permanent("composite lists the same evaluator twice; give each one weight")
    for name, weight in weights.items():
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
        ):
            raise Permanent(f"weight of {name!r} must be a finite number, got {weight!r}")
        if weight < 0:
            raise Permanent(f"weight of {name!r} is {weight}; weights must be >= 0")
    if not any(weights.values()):
        raise Permanent("all composite weights are zero; at least one must be positive")
