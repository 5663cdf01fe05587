"""``shapes-vqa``: a small question-answering model asked one yes/no question per clause.

CLIP-family judges compare a caption with captions one clause away, and on the generator's own
images they rank one prompt's candidates at within-prompt AUC ~0.85: they see shape worst, and
colour-shape pairs they never saw barely at all. This judge is trained on what the pixel
checker says about the generator's own images (:mod:`genloop.training.shapes.train_vqa`), and
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
from genloop.workers.shapes.scene import parse_caption

from .base import Evaluator, Scores
from .vqa_model import VqaNet, clause_names, clause_text, encode_question, to_batch

#: Bump when the questions or the score's formula change (it is part of the identity).
VERSION = "1"
WEIGHTS_FILE = "model.safetensors"
_SIZE = 64


def shipped_weights() -> Path:
    """The weights shipped in the package, beside shapes-clip's."""
    from genloop.workers import shapes

    return shapes.weights_dir() / "shapes-vqa" / WEIGHTS_FILE


def load_net(path: Path, device: str = "cpu") -> VqaNet:
    """A :class:`VqaNet` from a file :func:`~genloop.training.shapes.train_vqa.save` wrote."""
    if not path.is_file():
        raise Permanent(f"shapes-vqa weights not found at {path}; train them with "
                        "`python -m genloop.training.shapes.train_vqa --out DIR`")
    with safe_open(str(path), framework="pt") as f:
        config = json.loads((f.metadata() or {}).get("config", "{}"))
    net = VqaNet(**config)
    net.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    return net.to(device).eval()


class ShapesVqa(Evaluator):
    """Scores shapes images by per-clause P(yes), ``batch`` images per forward pass."""

    def __init__(self, weights: Path | None = None, *, device: str = "cpu", batch: int = 256,
                 fallback: Callable[[], Evaluator] | None = None) -> None:
        if batch < 1:
            raise Permanent(f"shapes-vqa: batch must be >= 1, got {batch}")
        path = Path(weights) if weights is not None else shipped_weights()
        self.device = device
        self.batch = batch
        self.net = load_net(path, device)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        self.identity = f"shapes-vqa:{VERSION}/{digest}"
        self._fallback = fallback
        # torch modules are safe to call from many threads in eval mode; the lock only keeps
        # two batches from fighting over the same CPU threads.
        self._lock = threading.Lock()

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        try:
            scene = parse_caption(text)
        except ValueError as exc:
            if self._fallback is None:
                raise Permanent(f"shapes-vqa judges shapes captions only: {exc}") from None
            return self._fallback().score(images, text)
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
        pixels = to_batch([_pixels(im) for im in images])
        asked = torch.from_numpy(questions).float().to(self.device)
        out = []
        with self._lock:
            for lo in range(0, len(images), self.batch):
                part = pixels[lo:lo + self.batch].to(self.device)
                logits = self.net(part, asked.expand(len(part), *asked.shape))
                out.append(torch.sigmoid(logits.float()).cpu().numpy())
        return np.concatenate(out)


def _pixels(image: Image.Image) -> np.ndarray:
    """uint8 ``(64, 64, 3)``; other sizes resized as the checker resizes them."""
    image = image.convert("RGB")
    if image.size != (_SIZE, _SIZE):
        resample = (Image.Resampling.BOX if image.size[0] >= _SIZE
                    else Image.Resampling.BILINEAR)
        image = image.resize((_SIZE, _SIZE), resample)
    return np.asarray(image, dtype=np.uint8)
