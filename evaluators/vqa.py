"""``shapes-vqa``: a small question-answering model asked one yes/no question per clause.

CLIP-family judges compare a caption with captions one clause away, and on the generator's own
images they rank one prompt's candidates at within-prompt AUC ~0.85: they see shape worst, and
colour-shape pairs they never saw barely at all. This judge is trained on what the pixel
checker says about the generator's own images (:mod:`genloop.shapes.training.train_vqa`), and
answers each clause as its own question (:mod:`.vqa_model`): is the first object's shape
"star"? Its P(yes) per clause, multiplied, is the chance (x100) that every clause holds, the
same scale as ``shapes-critic``'s and ``vlm-judge``'s, so ``target=50`` means "more likely right
than wrong" on all three. Each image gets a :class:`~genloop.sdk.ops.Critique` with every
clause's P(yes) x 100 and the weakest, as the critic gives; a two-object caption also gets a
``count`` clause ("two objects"), which the checker grades and no caption clause covers.

The model knows shapes captions only. Other prompts go to ``fallback`` (the registry's
``shapes-critic``, whose free-text clauses score with plain ``shapes-clip``), as the critic
itself falls back to free text, so a Loop with this judge behaves as one with the critic there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import ClauseScore, Critique
from genloop.shapes.scene import Scene

from .base import Scores
from .shapes_judge import ShapesJudge
from .vqa_model import (
    VqaNet,
    clause_names,
    clause_text,
    encode_question,
    to_batch,
    to_pixels,
)

#: Bump when the questions or the score's formula change (it is part of the identity).
VERSION = "1"


def load_net(path: Path, device: str = "cpu") -> VqaNet:
    """A :class:`VqaNet` from a file :func:`~genloop.shapes.training.train_vqa.save` wrote."""
    if not path.is_file():
        raise Permanent(f"shapes-vqa weights not found at {path}; train them with "
                        "`python -m genloop.shapes.training.train_vqa --out DIR`")
    with safe_open(str(path), framework="pt") as f:
        config = json.loads((f.metadata() or {}).get("config", "{}"))
    net = VqaNet(**config)
    net.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return net.to(device).eval()


class ShapesVqa(ShapesJudge):
    """Scores shapes images by per-clause P(yes), ``batch`` images per forward pass."""

    name, version, default_batch = "shapes-vqa", VERSION, 256

    def load_net(self, path: Path, device: str) -> VqaNet:
        return load_net(path, device)

    def score_scene(self, images: list[Image.Image], scene: Scene) -> Scores:
        names = clause_names(scene)
        p_yes = self.p_yes(images, np.stack([encode_question(scene, n) for n in names]))
        values, details = [], []
        for row in p_yes.tolist():
            weakest = min(range(len(names)), key=lambda k: row[k])
            values.append(100 * float(np.prod(row)))
            details.append(Critique(
                clauses=[ClauseScore(clause=n, text=clause_text(scene, n), score=100 * p)
                         for n, p in zip(names, row, strict=True)],
                weakest=names[weakest],
            ))
        return Scores(values=values, evaluator=self.identity, details=details)

    @torch.no_grad()
    def p_yes(self, images: list[Image.Image], questions: np.ndarray) -> np.ndarray:
        """``(images, questions)`` P(yes) of every question (encoded) about every image."""
        pixels = to_batch([to_pixels(im) for im in images])
        asked = torch.from_numpy(questions).float().to(self.device)
        out = []
        with self._lock:
            for lo in range(0, len(images), self.batch):
                part = pixels[lo:lo + self.batch].to(self.device)
                logits = self.net(part, asked.expand(len(part), *asked.shape))
                out.append(torch.sigmoid(logits.float()).cpu().numpy())
        return np.concatenate(out)
