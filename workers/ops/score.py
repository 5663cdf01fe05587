"""``score``: one evaluator score per candidate image (element-wise)."""

from __future__ import annotations

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import Candidate, ScoredCandidate, ScoreParams

from ..runtime.context import OpContext
from ..runtime.deferred import Deferred
from .registry import OpSpec


def _identity(params: ScoreParams, resources) -> str:
    return resources.evaluator(params.evaluator, params.options).identity


def score(params: ScoreParams, inputs: list, ctx: OpContext) -> Deferred | list:
    """Scores the candidates through the process's score batcher, which merges requests of
    many nodes and runs per evaluator; returns at once (a
    :class:`~genloop.workers.runtime.deferred.Deferred`). Images this process generated come from
    its image cache; only the others are read and decoded from the artifact store."""
    from genloop.evaluators import load_image

    try:
        candidates = [Candidate.model_validate(i, from_attributes=True) for i in inputs]
    except ValueError as exc:
        raise Permanent(f"score takes generated candidates as input: {exc}") from exc
    if not candidates:
        return []
    evaluator = ctx.resources.evaluator(params.evaluator, params.options)
    cache = getattr(ctx.resources, "images", None)
    images = []
    for c in candidates:
        image = cache.get(c.artifact) if cache is not None else None
        images.append(image if image is not None
                      else load_image(ctx.artifacts.get(c.artifact), name=c.artifact))

    def scored(scores) -> list[ScoredCandidate]:
        embeddings = scores.embeddings or [None] * len(candidates)
        details = scores.details or [None] * len(candidates)
        usage = scores.usage or [None] * len(candidates)
        return [
            ScoredCandidate(
                **c.model_dump(include=set(Candidate.model_fields)), score=value,
                evaluator=params.evaluator, embedding=emb, details=critique, usage=spent,
            )
            for c, value, emb, critique, spent in zip(candidates, scores.values, embeddings,
                                                      details, usage, strict=True)
        ]

    batcher = getattr(ctx.resources, "scoring", None)
    if batcher is None:  # resources without a batcher (a custom Resources): score here
        return scored(evaluator.score(images, params.text))
    return Deferred(batcher.submit(evaluator, images, params.text, ctx.check_cancelled,
                                   priority=ctx.priority), scored)


#: The built-in op (see :mod:`.builtin`).
SCORE = OpSpec("score", score, params=ScoreParams, output=ScoredCandidate, queue="gpu",
               elementwise=True, identity=_identity)
