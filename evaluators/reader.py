"""``shapes-reader``: the chance that the pixel checker would read an image as its caption says.

``shapes-vqa`` asks a trained model one question per clause and multiplies the answers; it
agrees with the checker per question but ranks one prompt's candidates worse than
``shapes-clip`` (it loses most where the generator swapped two objects: it must find "the first
object" from the rest of the question). This judge reads instead: a small CNN
(:mod:`.reader_model`) predicts the checker's reading of the image (background, object count,
the largest object's colour, shape, size and place, the two largest objects left or top first,
the axis they lie on) as one categorical head per slot, trained on the checker's readings of
the generator's own images (:mod:`genloop.shapes.training.train_reader`). A caption scores 100 x
the probability that the reading matches every clause
(:func:`.reader_model.caption_probability`), the scale of ``shapes-critic`` and ``shapes-vqa``,
so ``target=50`` means "more likely right than wrong" on each; the critique gives every clause's
probability x 100 and names the weakest, as the critic does (two objects add ``count``, which
the checker grades and no caption clause covers).

Each image is read twice, as it is and in a left-right mirror against the mirrored caption
(:meth:`~genloop.shapes.scene.Attributes.mirrored`), and the two probabilities averaged: the
checker reads a mirror image as the mirrored scene, and the reader, trained on both, errs on
the two differently. On ``benchmarks/critic_auc.py --prompts 100 --seeds 8`` the average
ranks one prompt's candidates at 0.943 against one reading's 0.933, drafts 0.950 against 0.931
(docs/judges.md). The shipped reader is three nets trained alike from three seeds, whose head
probabilities are averaged (:class:`~.reader_model.ReaderMembers`): 0.947, drafts 0.970.

Colour and shape are separate heads of separate branches, so a colour-shape pair held out of
training is scored from what the reader learnt of each alone. The model knows shapes captions
only; other prompts go to ``fallback`` (the registry's ``shapes-critic``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps
from safetensors import safe_open
from safetensors.torch import load_file

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import ClauseScore, Critique
from genloop.shapes.scene import Scene

from .base import Scores
from .reader_model import (
    ReaderMembers,
    ReaderNet,
    caption_probability,
    probabilities,
)
from .shapes_judge import ShapesJudge
from .vqa_model import to_batch, to_pixels

#: Bump when the heads or the score's formula change (it is part of the identity).
VERSION = "3"
#: What a critique shows for the ``count`` clause of a two-object caption.
COUNT_TEXT = "two objects"


def load_net(path: Path, device: str = "cpu") -> ReaderNet | ReaderMembers:
    """A :class:`ReaderNet` from a file :func:`~genloop.shapes.training.train_reader.save`
    wrote, or from a folder of such files (one per training seed) the
    :class:`ReaderMembers` that reads as all of them."""
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise Permanent(f"shapes-reader weights not found in {path}: no *.safetensors; "
                            "train them with `python -m genloop.shapes.training.train_reader "
                            "--out DIR`")
        nets = [_load_one(file, device) for file in files]
        return nets[0] if len(nets) == 1 else ReaderMembers(nets).eval()
    return _load_one(path, device)


def _load_one(path: Path, device: str) -> ReaderNet:
    if not path.is_file():
        raise Permanent(f"shapes-reader weights not found at {path}; train them with "
                        "`python -m genloop.shapes.training.train_reader --out DIR`")
    with safe_open(str(path), framework="pt") as f:
        config = json.loads((f.metadata() or {}).get("config", "{}"))
    net = ReaderNet(**config)
    net.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return net.to(device).eval()


class ShapesReader(ShapesJudge):
    """Scores shapes images by the probability of an all-correct reading, ``batch`` images per
    forward pass."""

    name, version, default_batch = "shapes-reader", VERSION, 512

    def shipped_weights(self) -> Path:
        """The shipped members' folder (``model*.safetensors``, one per training seed)."""
        return super().shipped_weights().parent

    def load_net(self, path: Path, device: str) -> ReaderNet | ReaderMembers:
        return load_net(path, device)

    def score_scene(self, images: list[Image.Image], scene: Scene) -> Scores:
        probs = self.probabilities([*images, *(ImageOps.mirror(im) for im in images)])
        n = len(images)
        total, clauses = caption_probability({k: v[:n] for k, v in probs.items()}, scene)
        total_m, clauses_m = caption_probability({k: v[n:] for k, v in probs.items()},
                                                 scene.mirrored())
        total = (total + total_m) / 2
        names = list(clauses)
        table = torch.stack([(clauses[k] + clauses_m[k]) / 2 for k in names], 1).numpy()
        values, details = [], []
        for value, row in zip(total.tolist(), table, strict=True):
            details.append(Critique(
                clauses=[ClauseScore(clause=n, text=_clause_text(scene, n), score=100 * float(p))
                         for n, p in zip(names, row, strict=True)],
                weakest=names[int(np.argmin(row))],
            ))
            values.append(100 * float(value))
        return Scores(values=values, evaluator=self.identity, details=details)

    @torch.no_grad()
    def probabilities(self, images: list[Image.Image]) -> dict[str, torch.Tensor]:
        """Every head's class probabilities for ``images``: name -> ``(N, classes)``."""
        pixels = to_batch([to_pixels(im) for im in images])
        out = []
        with self._lock:
            for lo in range(0, len(images), self.batch):
                out.append(self.net(pixels[lo:lo + self.batch].to(self.device)).float().cpu())
        return probabilities(torch.cat(out))


def _clause_text(scene: Scene, name: str) -> str:
    if name == "count":
        return COUNT_TEXT
    owner, _, field = name.rpartition(".")
    return str(getattr(getattr(scene, owner) if owner else scene, field))
