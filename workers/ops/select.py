"""``select``: the best of the scored candidates, by a selection strategy."""

from __future__ import annotations

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import ScoredCandidate, SelectParams

from ..runtime.context import OpContext
from .registry import OpSpec


def select(params: SelectParams, inputs: list, ctx: OpContext) -> list[ScoredCandidate]:
    from genloop.evaluators import select_threshold, select_top_k, select_top_k_diverse

    try:
        scored = [ScoredCandidate.model_validate(i, from_attributes=True) for i in inputs]
    except ValueError as exc:
        raise Permanent(f"select takes scored candidates as input: {exc}") from exc
    values = [c.score for c in scored]
    if params.strategy == "top-k":
        chosen = select_top_k(values, params.top_k)
    elif params.strategy == "threshold":
        if params.threshold is None:
            raise Permanent("strategy 'threshold' needs a threshold")
        chosen = select_threshold(values, params.threshold, params.top_k)
    else:
        embeddings = [c.embedding for c in scored if c.embedding is not None]
        if len(embeddings) < len(scored):
            raise Permanent("top-k-diverse needs image embeddings; use a CLIP-family evaluator")
        chosen = select_top_k_diverse(values, embeddings, params.top_k, params.diversity)
    return [scored[i] for i in chosen]


#: The built-in op (see :mod:`.builtin`).
SELECT = OpSpec("select", select, params=SelectParams, output=ScoredCandidate)
