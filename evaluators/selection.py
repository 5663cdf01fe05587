"""Choosing winners from scored candidates: top-k, threshold, and diverse top-k.

These are pure functions over numbers, so the ``select`` op can run them anywhere (no torch, no
model) and on scores computed earlier. Every strategy returns candidate indices best-first, and
breaks ties by the lower index so a rerun picks the same images.

Diverse selection exists because a generator's best candidates tend to be near-copies of one
image; an ad campaign asking for eight winners wants eight different ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import mul

from genloop.sdk.errors import Permanent

from .base import check_embeddings, check_finite


def select_top_k(scores: Sequence[float], k: int) -> list[int]:
    """The ``k`` highest-scoring indices (all of them if fewer), best first."""
    _check_k(k)
    check_finite(scores)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def select_threshold(scores: Sequence[float], threshold: float, k: int | None = None) -> list[int]:
    """Indices scoring at least ``threshold``, best first, at most ``k`` of them if given."""
    if k is not None:
        _check_k(k)
    if not math.isfinite(threshold):
        raise Permanent(f"threshold must be a finite number, got {threshold}")
    ranked = select_top_k(scores, len(scores))
    passing = [i for i in ranked if scores[i] >= threshold]
    return passing if k is None else passing[:k]


def select_top_k_diverse(
    scores: Sequence[float], embeddings: Sequence[Sequence[float]], k: int, diversity: float
) -> list[int]:
    """Pick ``k`` candidates by maximal marginal relevance (MMR) over their image embeddings.

    The first pick is always the best score. Each next pick maximises::

        (1 - diversity) * relevance(i)  -  diversity * max_{j already picked} cos(e_i, e_j)

    where ``relevance`` is the score rescaled to [0, 1] over these candidates (min to max), so the
    trade-off means the same for CLIP scores (0..100), aesthetic ratings (1..10) or a composite.

    ``diversity`` in [0, 1] is the trade-off: 0 is plain top-k; 1 ignores scores after the first
    pick and spreads out as far as possible. In between, a candidate beats a better-scoring one
    when its extra distance from the picks outweighs the lost relevance: with ``d = diversity``,
    when ``d * (cos gap) > (1 - d) * (relevance gap)``. At 0.5 a near-duplicate (cos 0.99) of a
    pick loses to a candidate with cos 0.5 unless it is about half the score range better.

    ``embeddings`` are those in :class:`~genloop.evaluators.Scores` (already computed for
    scoring; nothing is encoded again). They are renormalised here, so raw vectors work too.
    """
    _check_k(k)
    check_finite(scores)
    check_embeddings(embeddings, len(scores))
    if not (isinstance(diversity, (int, float)) and 0.0 <= diversity <= 1.0):
        raise Permanent(f"diversity must be between 0 and 1, got {diversity!r}")
    if not scores or k == 0:
        return []
    units = [_unit(e, i) for i, e in enumerate(embeddings)]
    low, high = min(scores), max(scores)
    spread = high - low
    relevance = [(s - low) / spread if spread > 0 else 1.0 for s in scores]

    first = select_top_k(scores, 1)[0]
    chosen = [first]
    # closest[i] = max cosine between candidate i and any pick so far, updated once per pick.
    closest = [sum(map(mul, units[i], units[first])) for i in range(len(scores))]
    remaining = set(range(len(scores))) - {first}
    while remaining and len(chosen) < k:
        best = max(
            remaining,
            key=lambda i: ((1 - diversity) * relevance[i] - diversity * closest[i], -i),
        )
        chosen.append(best)
        remaining.discard(best)
        for i in remaining:
            closest[i] = max(closest[i], sum(map(mul, units[i], units[best])))
    return chosen


def _unit(vector: Sequence[float], index: int) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise Permanent(f"embedding {index} has zero or non-finite length; it has no direction")
    return [x / norm for x in vector]


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise Permanent(f"k must be a non-negative integer, got {k!r}")
