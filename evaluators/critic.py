"""``ClauseCritic``: a CLIP judge that scores each clause of the prompt and names the weakest.

Plain CLIP score (cosine of image and prompt) ranks images badly when they differ in one word
of a long prompt: on generated shapes images it barely tells a wrong shape from a right one.
The critic asks per clause instead. For a clause with alternatives (see :mod:`.clauses`), its
score is CLIP's probability, softmax over ``logit_scale x cos``, that the image matches the
prompt rather than any prompt with that clause changed: a relative question, which CLIP
answers far better than an absolute one. The image's score is the geometric mean of its clause
probabilities (x100): it ranks images like the product, the chance that *every* clause holds if
CLIP's clause answers were independent. A free-text clause has no alternatives; its score is the
plain CLIP score of the clause alone, and the image's score is the mean over clauses.

Each image also gets a :class:`~genloop.sdk.ops.Critique` (every clause's score and the weakest),
which refiners read to decide what to fix.
"""

from __future__ import annotations

import torch
from PIL import Image

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import ClauseScore, Critique

from .base import Evaluator, Scores
from .clauses import Clause, split_clauses
from .embedding import EmbeddingEvaluator


class ClauseCritic(Evaluator):
    """Per-clause scores over a CLIP-like ``base`` (any :class:`EmbeddingEvaluator`)."""

    probability = True

    def __init__(self, base: Evaluator, *, name: str = "clause-critic") -> None:
        if not isinstance(base, EmbeddingEvaluator):
            raise Permanent(f"a clause critic needs a CLIP-like base evaluator that embeds "
                            f"images and texts, not {base!r}")
        self.base = base
        self.device = base.device
        self.identity = f"{name}:1/{base.identity}"
        scale = getattr(getattr(base, "model", None), "logit_scale", None)
        #: CLIP's own temperature, as it was trained; 100 (CLIP's cap) when the model has none.
        self.logit_scale = float(scale.detach().exp()) if isinstance(scale, torch.Tensor) else 100.0

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        clauses = split_clauses(text)
        image_rows = self.base.embed_images(images)
        texts = [text] + [t for c in clauses for t in (c.alternatives or (c.text,))]
        text_rows = self.base.embed_texts(texts)
        cos = (image_rows @ text_rows.T).float()  # (images, texts)
        per_clause = torch.stack(
            [self._clause_scores(cos, c, start) for c, start in _offsets(clauses)], dim=1
        )  # (images, clauses), each in [0, 1]
        structured = all(c.alternatives for c in clauses)
        if structured:
            overall = per_clause.clamp(min=1e-6).log().mean(dim=1).exp()
        else:
            overall = per_clause.mean(dim=1)
        details = []
        for row in per_clause.tolist():
            weakest = min(range(len(clauses)), key=lambda k: row[k])
            details.append(Critique(
                clauses=[ClauseScore(clause=c.name, text=c.text, score=100 * v)
                         for c, v in zip(clauses, row, strict=True)],
                weakest=clauses[weakest].name,
            ))
        return Scores(values=[100 * v for v in overall.tolist()],
                      embeddings=image_rows.cpu().tolist(), evaluator=self.identity,
                      details=details)

    def _clause_scores(self, cos: torch.Tensor, clause: Clause, start: int) -> torch.Tensor:
        if not clause.alternatives:
            return cos[:, start].clamp(min=0)
        alternatives = cos[:, start:start + len(clause.alternatives)]
        logits = self.logit_scale * torch.cat([cos[:, :1], alternatives], dim=1)
        return logits.softmax(dim=1)[:, 0]


def _offsets(clauses: list[Clause]) -> list[tuple[Clause, int]]:
    """Each clause with the column where its texts start (column 0 is the whole prompt)."""
    out, start = [], 1
    for c in clauses:
        out.append((c, start))
        start += max(1, len(c.alternatives))
    return out

