"""The evaluator contract: what every judge takes, what it returns, and how it names itself.

An evaluator turns candidate images and a prompt into one number per image. The runtime calls
:meth:`Evaluator.score` from its ``score`` and ``select`` ops, stores the :class:`Scores`, and puts
:attr:`Evaluator.identity` into result keys, so a score is recomputed only when the judge changes.

This module imports neither torch nor a model library: the SDK and the selection strategies can
use the types without paying for them. Input checks live here, once, so every back end reports
bad inputs with the same :class:`~genloop.sdk.errors.Permanent` messages.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

from PIL import Image
from pydantic import BaseModel, ConfigDict, model_validator

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import Critique, JudgeUsage


class Scores(BaseModel):
    """One evaluator's verdict on a list of candidates, in the order they were given.

    ``values[i]`` is the score of image ``i``; what it means depends on the evaluator (CLIP
    evaluators return ``100 * max(cos, 0)``). ``embeddings[i]`` is the L2-normalised image
    embedding the score was computed from, kept so that diverse selection reuses it instead of
    encoding the images again; it is ``None`` for evaluators that have no embedding.
    """

    model_config = ConfigDict(frozen=True)

    values: list[float]
    embeddings: list[list[float]] | None = None
    evaluator: str
    #: Per-clause scores of each image, from critic evaluators; ``None`` from plain judges.
    details: list[Critique] | None = None
    #: What a hosted judge was billed for each image; ``None`` from judges that run here.
    usage: list[JudgeUsage] | None = None

    @model_validator(mode="after")
    def _shapes_agree(self) -> Scores:
        if self.embeddings is not None:
            check_embeddings(self.embeddings, len(self.values))
        if self.details is not None and len(self.details) != len(self.values):
            raise Permanent(f"got {len(self.details)} critiques for {len(self.values)} scores")
        if self.usage is not None and len(self.usage) != len(self.values):
            raise Permanent(f"got {len(self.usage)} usages for {len(self.values)} scores")
        return self


class Evaluator(ABC):
    """A judge of images against a prompt.

    Subclasses implement :meth:`_score` and set :attr:`identity`; :meth:`score` checks the
    inputs first, so ``_score`` only ever sees a non-empty list of PIL images and (when
    :attr:`needs_text` is true) a non-blank prompt. Instances are shared between threads by the
    registry, so ``_score`` must not keep per-call state on ``self``.
    """

    #: Stable name of model and weights; goes into result keys. Change it when scores change.
    identity: str
    #: The torch device the evaluator runs on ("cpu", "cuda", "cuda:1"), or "cpu" if it has none.
    device: str = "cpu"
    #: Evaluators that ignore the prompt (an aesthetic head) set this to False.
    needs_text: bool = True
    #: Whether a score is meant as a probability x 100 that the image is right (the critics,
    #: the trained shapes judges, ``vlm-judge``) rather than a similarity (CLIP's cosine x 100):
    #: an ``ensemble`` adds the former's log-odds, the latter's score as it is.
    probability: bool = False

    def score(self, images: Sequence[Image.Image], text: str) -> Scores:
        """Score every image against ``text``; an empty ``images`` gives empty scores."""
        checked = check_images(images)
        if self.needs_text:
            check_text(text)
        if not checked:
            return Scores(values=[], embeddings=None, evaluator=self.identity)
        return self._score(checked, text)

    @abstractmethod
    def _score(self, images: list[Image.Image], text: str) -> Scores:
        """Score validated inputs."""

    def score_many(self, requests: Sequence[tuple[Sequence[Image.Image], str]]) -> list[Scores]:
        """Score several ``(images, text)`` requests as few model calls as possible: here, one
        :meth:`score` per distinct text over all its requests' images. CLIP-family back ends
        override it to encode every image once whatever the texts."""
        by_text: dict[str, list[int]] = {}
        for i, (_, text) in enumerate(requests):
            by_text.setdefault(text, []).append(i)
        out: list[Scores | None] = [None] * len(requests)
        for text, members in by_text.items():
            merged = self.score([im for i in members for im in requests[i][0]], text)
            start = 0
            for i in members:
                n = len(requests[i][0])
                out[i] = _slice(merged, start, start + n)
                start += n
        return out  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(identity={self.identity!r}, device={self.device!r})"


def _slice(scores: Scores, start: int, stop: int) -> Scores:
    return Scores(
        values=scores.values[start:stop],
        embeddings=scores.embeddings[start:stop] if scores.embeddings is not None else None,
        evaluator=scores.evaluator,
        details=scores.details[start:stop] if scores.details is not None else None,
        usage=scores.usage[start:stop] if scores.usage is not None else None,
    )


def check_text(text: object) -> str:
    """Return ``text`` if it is a non-blank string, else raise :class:`Permanent`."""
    if not isinstance(text, str):
        raise Permanent(f"prompt must be a string, got {type(text).__name__}")
    if not text.strip():
        raise Permanent("prompt is empty: give the text the images should be scored against")
    return text


def check_images(images: Sequence[object]) -> list[Image.Image]:
    """Return ``images`` as a list if every item is a PIL image, else raise :class:`Permanent`."""
    if isinstance(images, (str, bytes)) or not isinstance(images, Sequence):
        raise Permanent(f"images must be a sequence of PIL images, got {type(images).__name__}")
    for i, image in enumerate(images):
        if not isinstance(image, Image.Image):
            raise Permanent(
                f"image {i} is a {type(image).__name__}, not a PIL image; "
                "decode artifact bytes with genloop.evaluators.load_image"
            )
    return list(images)  # type: ignore[arg-type]


def check_embeddings(embeddings: Sequence[Sequence[float]], count: int) -> int:
    """Check there are ``count`` embeddings of one non-zero size; return that size."""
    if len(embeddings) != count:
        raise Permanent(f"got {len(embeddings)} embeddings for {count} scores; they must match")
    sizes = {len(e) for e in embeddings}
    if len(sizes) > 1:
        raise Permanent(f"embeddings have mismatched sizes {sorted(sizes)}; use one evaluator")
    size = sizes.pop() if sizes else 0
    if count and size == 0:
        raise Permanent("embeddings are empty vectors")
    return size


def check_finite(values: Sequence[float], what: str = "score") -> None:
    """Raise :class:`Permanent` if any value is NaN or infinite."""
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise Permanent(f"{what} {i} is {value}; only finite numbers can be compared")
