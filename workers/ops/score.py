"""``score``: one evaluator score per candidate image (element-wise)."""

from __future__ import annotations

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import Candidate, ScoredCandidate, ScoreParams

from ..context import OpContext
from .registry import op


def _identity(params: ScoreParams, resources) -> str:
    return resources.evaluator(params.evaluator).identity


@op("score", params=ScoreParams, output=ScoredCandidate, queue="gpu", elementwise=True,
    identity=_identity)
def score(params: ScoreParams, inputs: list, ctx: OpContext) -> list[ScoredCandidate]:
    from genloop.evaluators import load_image

    try:
        candidates = [Candidate.model_validate(i, from_attributes=True) for i in inputs]
    except ValueError as exc:
        raise Permanent(f"score takes generated candidates as input: {exc}") from exc
    if not candidates:
        return []
    evaluator = ctx.resources.evaluator(params.evaluator)
    images = [load_image(ctx.artifacts.get(c.artifact), name=c.artifact) for c in candidates]
    scores = evaluator.score(images, params.text)
    embeddings = scores.embeddings or [None] * len(candidates)
    details = scores.details or [None] * len(candidates)
    return [
        ScoredCandidate(
            **c.model_dump(include=set(Candidate.model_fields)), score=value,
            evaluator=params.evaluator, embedding=emb, details=critique,
        )
        for c, value, emb, critique in zip(candidates, scores.values, embeddings, details,
                                           strict=True)
    ]
