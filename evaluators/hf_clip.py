"""CLIP judges in Hugging Face format (CLIPModel + CLIPProcessor saved in a folder).

Many published judges (PickScore, HPS v2 exports, fine-tuned CLIPs) ship as a transformers
folder rather than an open_clip checkpoint. This back end loads one from a local path (workers do
not download) and scores exactly as torchmetrics' ``clip_score`` does with the same model and
processor: same processor call, same ``get_*_features``, same ``100 * cos``. The one difference
is the clamp, per image here and on the batch mean there (see :mod:`genloop.evaluators.embedding`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from PIL import Image

from genloop.sdk.errors import Permanent
from genloop.workers.models.fingerprint import fingerprint

from .embedding import EmbeddingEvaluator, resolve_device, resolve_dtype

logger = logging.getLogger(__name__)

_WEIGHT_FILES = ("*.safetensors", "*.bin", "config.json", "*processor*.json", "tokenizer*.json")


class HFClipEvaluator(EmbeddingEvaluator):
    """CLIP score from ``transformers.CLIPModel`` and ``CLIPProcessor`` stored at ``path``."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        batch_size: int = 64,
        text_cache_size: int = 1024,
    ) -> None:
        if path is None:
            raise Permanent("hf-clip needs path=<folder with a saved CLIPModel and CLIPProcessor>")
        folder = Path(path)
        if not folder.is_dir():
            raise Permanent(f"hf-clip: no model folder at {str(folder)!r}")
        resolved = resolve_device(device)
        super().__init__(
            device=resolved,
            dtype=resolve_dtype(resolved, dtype),
            batch_size=batch_size,
            text_cache_size=text_cache_size,
        )
        from transformers import CLIPModel, CLIPProcessor, CLIPTextConfig

        started = time.perf_counter()
        try:
            model = CLIPModel.from_pretrained(folder, dtype=self.dtype)
            self.processor = CLIPProcessor.from_pretrained(folder)
        except (OSError, ValueError) as exc:
            raise Permanent(f"hf-clip: cannot load CLIP from {str(folder)!r}: {exc}") from exc
        # transformers wraps ``to`` in functools.wraps(Module.to), whose type has no ``self``.
        self.model = model.to(self.device).eval()  # type: ignore[arg-type]
        config = model.config
        if config.projection_dim is None or not isinstance(config.text_config, CLIPTextConfig):
            raise Permanent(f"hf-clip: {str(folder)!r} is not a CLIP model with a projection")
        self.embed_dim = int(config.projection_dim)
        self.max_length = int(config.text_config.max_position_embeddings)
        self.identity = f"hf-clip:{folder.name}@{fingerprint(folder, patterns=_WEIGHT_FILES)}"
        logger.info(
            "loaded %s on %s (%s) in %.2fs",
            self.identity,
            self.device,
            self.dtype,
            time.perf_counter() - started,
        )

    def _encode_images(self, images: list[Image.Image]) -> torch.Tensor:
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return _features(
            self.model.get_image_features(pixel_values=pixels.to(self.device, self.dtype))
        )

    def _encode_texts(self, texts: list[str]) -> torch.Tensor:
        tokens = self.processor(
            text=texts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_length,
        )
        return _features(
            self.model.get_text_features(
                input_ids=tokens["input_ids"].to(self.device),
                attention_mask=tokens["attention_mask"].to(self.device),
            )
        )


def _features(output: object) -> torch.Tensor:
    """transformers < 5 returns the projected features; 5.x wraps them in ``pooler_output``."""
    if isinstance(output, torch.Tensor):
        return output
    pooled = getattr(output, "pooler_output", None)
    if not isinstance(pooled, torch.Tensor):
        raise Permanent(f"CLIP features came back as {type(output).__name__}, not a tensor")
    return pooled
