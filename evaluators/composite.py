"""A weighted sum of other evaluators, for campaigns that care about more than one thing.

``score = sum(weight[name] * evaluator[name].score)``, per image. The weights are not normalised:
the parts' scales differ (CLIP 0..100, a LAION aesthetic rating roughly 1..10), and only the
caller knows what trade-off between them is meant. Weights are checked up front, because a typo
or a negative weight would otherwise quietly rank candidates by the wrong thing.
"""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from genloop.sdk.errors import Permanent

from .base import Evaluator, Scores, check_finite
from .parts import WeightedParts


class CompositeEvaluator(WeightedParts):
    """Sum of ``weight * part.score`` over ``parts``, given as ``(evaluator, weight)`` pairs.

    The embeddings returned are those of the first part, in the given order, that has any, so
    diverse selection after a composite score reuses (for example) the CLIP image embeddings.
    """

    kind, example = "composite", 'weights={"clip": 1.0, "aesthetic": 0.5}'

    def __init__(self, parts: Sequence[tuple[Evaluator, float]]) -> None:
        super().__init__(parts)
        self.identity = f"composite({self.terms})"

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

