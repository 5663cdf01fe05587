"""``shapes-reader``: the chance that the pixel checker would read an image as its caption says.

``shapes-vqa`` asks a trained model one question per clause and multiplies the answers; it
agrees with the checker per question but ranks one prompt's candidates worse than
``shapes-clip`` (it loses most where the generator swapped two objects: it must find "the first
object" from the rest of the question). This judge reads instead: a small CNN
(:mod:`.reader_model`) predicts the checker's reading of the image (background, object count,
the largest object's colour, shape, size and place, the two largest objects left or top first,
the axis they lie on) as one categorical head per slot, trained on the checker's readings of
the generator's own images (:mod:`genloop.training.shapes.train_reader`). A caption scores 100 x
the probability that the reading matches every clause
(:func:`.reader_model.caption_probability`), the scale of ``shapes-critic`` and ``shapes-vqa``,
so ``target=50`` means "more likely right than wrong" on each; the critique gives every clause's
probability x 100 and names the weakest, as the critic does (two objects add ``count``, which
the checker grades and no caption clause covers).

Colour and shape are separate heads of separate branches, so a colour-shape pair held out of
training is scored from what the reader learnt of each alone. The model knows shapes captions
only; other prompts go to ``fallback`` (the registry's ``shapes-critic``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import ClauseScore, Critique
from genloop.workers.shapes.scene import Scene, parse_caption

from .base import Evaluator, Scores
from .reader_model import (
    ReaderNet,
    caption_probability,
    probabilities,
    to_batch,
    to_pixels,
)

#: Bump when the heads or the score's formula change (it is part of the identity).
VERSION = "1"
WEIGHTS_FILE = "model.safetensors"
#: What a critique shows for the ``count`` clause of a two-object caption.
COUNT_TEXT = "two objects"


def shipped_weights() -> Path:
    """The weights shipped in the package, beside shapes-clip's."""
    from genloop.workers import shapes

    return shapes.weights_dir() / "shapes-reader" / WEIGHTS_FILE


def load_net(path: Path, device: str = "cpu") -> ReaderNet:
    """A :class:`ReaderNet` from a file :func:`~genloop.training.shapes.train_reader.save`
    wrote."""
    if not path.is_file():
        raise Permanent(f"shapes-reader weights not found at {path}; train them with "
                        "`python -m genloop.training.shapes.train_reader --out DIR`")
    with safe_open(str(path), framework="pt") as f:
        config = json.loads((f.metadata() or {}).get("config", "{}"))
    net = ReaderNet(**config)
    net.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return net.to(device).eval()


class ShapesReader(Evaluator):
    """Scores shapes images by the probability of an all-correct reading, ``batch`` images per
    forward pass."""

    def __init__(self, weights: Path | None = None, *, device: str = "cpu", batch: int = 512,
                 fallback: Callable[[], Evaluator] | None = None) -> None:
        if batch < 1:
            raise Permanent(f"shapes-reader: batch must be >= 1, got {batch}")
        path = Path(weights) if weights is not None else shipped_weights()
        self.device = device
        self.batch = batch
        self.net = load_net(path, device)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        self.identity = f"shapes-reader:{VERSION}/{digest}"
        self._fallback = fallback
        # eval-mode modules are safe across threads; the lock keeps two batches from fighting
        # over the same CPU threads.
        self._lock = threading.Lock()

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        try:
            scene = parse_caption(text)
        except ValueError as exc:
            if self._fallback is None:
                raise Permanent(f"shapes-reader judges shapes captions only: {exc}") from None
            return self._fallback().score(images, text)
        total, clauses = caption_probability(self.probabilities(images), scene)
        names = list(clauses)
        table = torch.stack([clauses[n] for n in names], 1).numpy()
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

