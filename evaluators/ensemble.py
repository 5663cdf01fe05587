"""``ensemble``: other judges combined with weights learned on labelled images.

``composite`` sums scores with weights the caller picks, on the parts' own scales. This judge
learns its weights (:func:`fit`) and answers on the scale of the critics: ``100 x sigmoid(bias
+ sum weight[part] x feature(part))``, a probability that the image is right, so
``Loop.target=50`` means "more likely right than wrong" as on ``shapes-reader``. A part's
feature is its log-odds when its score is a probability x 100 (:attr:`Evaluator.probability`:
the critics, the trained shapes judges, ``vlm-judge``) and its score / 100 otherwise (CLIP's
cosine). The critique is the first part's that gives one, and so are the image embeddings
(diverse selection reuses them).

Fitting (:func:`fit`) is done in two steps, each a small logistic regression with torch's
L-BFGS (no scikit-learn among genloop's dependencies, and nothing else here needs it): the
weights by a pairwise loss over every (right, wrong) pair of images of one prompt, the way a
loop uses a judge, ranking one prompt's candidates; then one scale and the bias over all images
at once, so that the score is calibrated and a single target holds for every prompt.
``python -m genloop.shapes.training.fit_ensemble`` fits them on the shapes world.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from genloop.sdk.errors import Permanent

from .base import Evaluator, Scores, check_finite
from .parts import WeightedParts

#: A probability score is clipped this far from 0 and 1 before its log-odds are taken.
_EPS = 1e-4


def feature(values: Sequence[float] | np.ndarray, probability: bool) -> np.ndarray:
    """What a part's scores add to the ensemble's log-odds, per unit of weight."""
    v = np.asarray(values, dtype=np.float64) / 100
    if not probability:
        return v
    p = np.clip(v, _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


class LearnedEnsemble(WeightedParts):
    """``100 x sigmoid(bias + sum weight x feature)`` over ``parts``, given as ``(evaluator,
    weight)`` pairs; weights may be negative (a learned weight can be)."""

    probability = True

    kind = "ensemble"
    example = ('weights={"shapes-reader": 1.0, "shapes-clip": 0.5}, bias=0 (fit them with '
               'python -m genloop.shapes.training.fit_ensemble)')

    def __init__(self, parts: Sequence[tuple[Evaluator, float]], bias: float = 0.0) -> None:
        super().__init__(parts, bias=bias)
        self.bias = float(bias)
        self.identity = f"ensemble({self.terms};{self.bias:g})"

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        logit = np.full(len(images), self.bias)
        details = embeddings = None
        for part, weight in self.parts:
            scores = part.score(images, text)
            if len(scores.values) != len(images):
                raise Permanent(f"{part.identity} returned {len(scores.values)} scores for "
                                f"{len(images)} images")
            logit += weight * feature(scores.values, part.probability)
            details = details if details is not None else scores.details
            embeddings = embeddings if embeddings is not None else scores.embeddings
        values = (100 / (1 + np.exp(-logit))).tolist()
        check_finite(values)
        return Scores(values=values, evaluator=self.identity, details=details,
                      embeddings=embeddings)


def fit(x: np.ndarray, correct: np.ndarray, groups: np.ndarray,
        l2: float = 1e-3) -> tuple[np.ndarray, float]:
    """Weights and bias for features ``x`` ``(images, parts)`` of images labelled ``correct``,
    ``groups`` naming each image's prompt: ranking weights from every (right, wrong) pair of one
    prompt, then a scale and the bias from all images pooled."""
    x, correct, groups = np.asarray(x, float), np.asarray(correct, bool), np.asarray(groups)
    if not (len(x) == len(correct) == len(groups)):
        raise ValueError("x, correct and groups must have one row per image")
    pairs = [x[i] - x[j] for g in np.unique(groups)
             for i in np.flatnonzero((groups == g) & correct)
             for j in np.flatnonzero((groups == g) & ~correct)]
    if not pairs:
        raise ValueError("no prompt has both a right and a wrong image: nothing to rank")
    direction = _logistic(np.stack(pairs), np.ones(len(pairs)), l2, bias=False)[0]
    (scale,), bias = _logistic((x @ direction)[:, None], correct.astype(float), 0.0, bias=True)
    return scale * direction, bias


def _logistic(x: np.ndarray, y: np.ndarray, l2: float, *, bias: bool) -> tuple[np.ndarray, float]:
    xs, ys = torch.from_numpy(x).double(), torch.from_numpy(y).double()
    w = torch.zeros(x.shape[1] + bias, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=500, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = xs @ w[:x.shape[1]] + (w[-1] if bias else 0)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, ys)
        loss = loss + l2 * (w[:x.shape[1]] ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    out = w.detach().numpy()
    return out[:x.shape[1]], float(out[-1]) if bias else 0.0


def within_prompt_auc(scores: np.ndarray, correct: np.ndarray, groups: np.ndarray) -> float:
    """Mean over groups with both verdicts of P(a right image outscores a wrong one), ties
    half: the selection power a loop gets from a judge."""
    scores, correct, groups = np.asarray(scores), np.asarray(correct, bool), np.asarray(groups)
    aucs = []
    for g in np.unique(groups):
        s, c = scores[groups == g], correct[groups == g]
        pos, neg = s[c], s[~c]
        if len(pos) and len(neg):
            aucs.append((pos[:, None] > neg).mean() + 0.5 * (pos[:, None] == neg).mean())
    return float(np.mean(aucs)) if aucs else float("nan")
