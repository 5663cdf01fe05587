"""The shared half of every CLIP-family back end: batching, the prompt cache, and the score.

open_clip and Hugging Face CLIP differ only in how they turn pixels and strings into vectors.
Everything after that is here, once, so both back ends batch, cache and score identically:

    score = 100 * max(cos(image embedding, text embedding), 0), per image.

torchmetrics' ``clip_score`` computes ``max(mean(100 * cos), 0)``: it clamps the *mean* over the
batch. For one image the two agree; for a batch ours keeps each image's own score, which is what
ranking needs (a batch mean would hide which candidate was good).
"""

from __future__ import annotations

import contextlib
import threading
from abc import abstractmethod
from collections.abc import Iterator, Sequence

import torch
from PIL import Image

from genloop.sdk.errors import Permanent, Transient

from .base import Evaluator, Scores, check_images, check_text
from .text_cache import TextCache


def resolve_device(device: str | torch.device | None) -> str:
    """``None`` means CUDA when it is available, else CPU; anything else is taken as given."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError) as exc:
        raise Permanent(f"invalid device {device!r}: {exc}") from exc


def resolve_dtype(device: str, dtype: torch.dtype | None) -> torch.dtype:
    """fp16 on CUDA (CLIP towers lose nothing that matters to ranking), fp32 elsewhere."""
    if dtype is not None:
        return dtype
    return torch.float16 if torch.device(device).type == "cuda" else torch.float32


class EmbeddingEvaluator(Evaluator):
    """A CLIP-like judge: subclasses encode pixels and text; this class does the rest.

    Images are encoded in batches of ``batch_size``; prompts go through an LRU
    :class:`TextCache` keyed by :attr:`identity`. ``images_encoded`` and ``texts_encoded`` count
    what actually went through the model.
    """

    def __init__(
        self, *, device: str, dtype: torch.dtype, batch_size: int = 64, text_cache_size: int = 1024
    ) -> None:
        if batch_size < 1:
            raise Permanent(f"batch_size must be at least 1, got {batch_size}")
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self.text_cache: TextCache[torch.Tensor] = TextCache(text_cache_size)
        self.images_encoded = 0
        #: Size of the embeddings, when the model says so without running; subclasses set it.
        self.embed_dim: int | None = None
        self.texts_encoded = 0
        self._count_lock = threading.Lock()

    @abstractmethod
    def _encode_images(self, images: list[Image.Image]) -> torch.Tensor:
        """Return one raw (unnormalised) embedding row per image, on :attr:`device`."""

    @abstractmethod
    def _encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Return one raw (unnormalised) embedding row per text, on :attr:`device`."""

    def embed_images(self, images: Sequence[Image.Image]) -> torch.Tensor:
        """L2-normalised fp32 image embeddings, shape ``(len(images), dim)``."""
        checked = check_images(images)
        rows = []
        with torch.inference_mode(), _translate_torch_errors():
            for start in range(0, len(checked), self.batch_size):
                batch = checked[start : start + self.batch_size]
                rows.append(self._encode_images(batch).float())
        with self._count_lock:
            self.images_encoded += len(checked)
        if not rows:
            raise Permanent("no images to embed")
        return torch.nn.functional.normalize(torch.cat(rows), dim=-1)

    def embed_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised fp32 text embeddings, served from the prompt cache when possible."""
        checked = [check_text(t) for t in texts]
        rows = self.text_cache.get_many(self.identity, checked, self._encode_and_split)
        return torch.stack(rows)

    def _encode_and_split(self, texts: list[str]) -> list[torch.Tensor]:
        with torch.inference_mode(), _translate_torch_errors():
            encoded = self._encode_texts(texts).float()
        with self._count_lock:
            self.texts_encoded += len(texts)
        return list(torch.nn.functional.normalize(encoded, dim=-1).unbind(0))

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        return self.score_texts(images, [text])[0]

    def score_many(self, requests: Sequence[tuple[Sequence[Image.Image], str]]) -> list[Scores]:
        """Requests from many nodes and runs in one pass: every image encoded once (in batches
        of ``batch_size``), every distinct text once (through the shared prompt cache)."""
        if not requests:
            return []
        images = check_images([im for ims, _ in requests for im in ims])
        texts = list(dict.fromkeys(text for _, text in requests))
        text_rows = self.embed_texts(texts)
        if not images:
            return [Scores(values=[], embeddings=None, evaluator=self.identity) for _ in requests]
        image_rows = self.embed_images(images)
        if image_rows.shape[1] != text_rows.shape[1]:
            raise Permanent(
                f"{self.identity}: image embeddings have size {image_rows.shape[1]} but text "
                f"embeddings {text_rows.shape[1]}; the checkpoint does not match its config"
            )
        column = {t: i for i, t in enumerate(texts)}
        values = (100 * (image_rows @ text_rows.T).clamp(min=0)).cpu()
        embeddings = image_rows.cpu().tolist()
        out, start = [], 0
        for ims, text in requests:
            stop = start + len(ims)
            out.append(Scores(values=values[start:stop, column[text]].tolist(),
                              embeddings=embeddings[start:stop] or None, evaluator=self.identity))
            start = stop
        return out

    def score_texts(self, images: Sequence[Image.Image], texts: Sequence[str]) -> list[Scores]:
        """Score the same images against several prompts, encoding each image once."""
        if not texts:
            return []
        text_rows = self.embed_texts(texts)
        if not images:
            check_images(images)
            return [Scores(values=[], embeddings=None, evaluator=self.identity) for _ in texts]
        image_rows = self.embed_images(images)
        if image_rows.shape[1] != text_rows.shape[1]:
            raise Permanent(
                f"{self.identity}: image embeddings have size {image_rows.shape[1]} but text "
                f"embeddings {text_rows.shape[1]}; the checkpoint does not match its config"
            )
        values = (100 * (image_rows @ text_rows.T).clamp(min=0)).T.cpu().tolist()
        embeddings = image_rows.cpu().tolist()
        return [Scores(values=v, embeddings=embeddings, evaluator=self.identity) for v in values]


@contextlib.contextmanager
def _translate_torch_errors() -> Iterator[None]:
    """Out-of-memory is worth a retry (the device may free up); undecodable pixels are not."""
    try:
        yield
    except torch.OutOfMemoryError as exc:
        raise Transient(f"out of device memory while scoring: {exc}") from exc
    except (OSError, SyntaxError) as exc:
        raise Permanent(f"an image could not be decoded: {exc}") from exc
