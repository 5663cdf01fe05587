"""What the shapes world's trained judges (``shapes-vqa``, ``shapes-reader``) share: weights of
their own (the shipped ones unless given), an identity that names them, batches of images on
one lock, and shapes captions only (anything else goes to a fallback judge, or is refused)."""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path

from PIL import Image
from torch import nn

from genloop.sdk.errors import Permanent
from genloop.shapes.scene import Scene, parse_caption
from genloop.workers.models.fingerprint import fingerprint

from .base import Evaluator, Scores


class ShapesJudge(Evaluator):
    """Subclasses name themselves (``name``, ``version``: both in the identity), say where
    their weights are and how to load them, and score a parsed caption."""

    name: str
    probability = True
    #: Bump when the score's formula changes (it is part of the identity).
    version: str
    default_batch: int

    def __init__(self, weights: Path | None = None, *, device: str = "cpu",
                 batch: int | None = None,
                 fallback: Callable[[], Evaluator] | None = None) -> None:
        batch = self.default_batch if batch is None else batch
        if batch < 1:
            raise Permanent(f"{self.name}: batch must be >= 1, got {batch}")
        path = Path(weights) if weights is not None else self.shipped_weights()
        self.device = device
        self.batch = batch
        self.net = self.load_net(path, device)
        # A folder's weights are its members (every *.safetensors), all in the identity.
        digest = fingerprint(path, patterns=("*.safetensors",))
        self.identity = f"{self.name}:{self.version}/{digest}"
        self._fallback = fallback
        # eval-mode modules are safe across threads; the lock keeps two batches from fighting
        # over the same CPU threads.
        self._lock = threading.Lock()

    def shipped_weights(self) -> Path:
        """The weights shipped in the package, beside shapes-clip's."""
        from genloop import shapes

        return shapes.weights_dir() / self.name / "model.safetensors"

    @abstractmethod
    def load_net(self, path: Path, device: str) -> nn.Module: ...

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        try:
            scene = parse_caption(text)
        except ValueError as exc:
            if self._fallback is None:
                raise Permanent(f"{self.name} judges shapes captions only: {exc}") from None
            return self._fallback().score(images, text)
        return self.score_scene(images, scene)

    @abstractmethod
    def score_scene(self, images: list[Image.Image], scene: Scene) -> Scores: ...
