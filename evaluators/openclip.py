"""The default judge: an open_clip model, built with open_clip's own factory and transforms.

Real use names an open_clip architecture and its weights, exactly as open_clip does::

    OpenClipEvaluator("ViT-B-32", pretrained="laion2b_s34b_b79k")   # a published tag
    OpenClipEvaluator("ViT-B-32", pretrained="/models/clip.safetensors")  # a local checkpoint

so preprocessing and tokenisation are whatever the checkpoint was trained with. Without
``pretrained``, the weights are random but seeded, which makes the tiny configs below (registered
with open_clip only when first used) a real, deterministic model for tests and demos that need no
download. Their scores rank nothing meaningfully; their code path is the production one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

import open_clip
import torch
from PIL import Image

from genloop.sdk.errors import Permanent
from genloop.workers.models.fingerprint import fingerprint

from .embedding import EmbeddingEvaluator, resolve_device, resolve_dtype

#: Small architectures (ViT image tower, transformer text tower, open_clip's 49408-token BPE)
#: that build in milliseconds on a CPU. Bump the version suffix if a config changes.
TINY_CONFIGS: dict[str, dict[str, object]] = {
    "tiny-clip-v1": {
        "embed_dim": 32,
        "vision_cfg": {
            "image_size": 64,
            "layers": 2,
            "width": 64,
            "patch_size": 16,
            "head_width": 32,
        },
        "text_cfg": {
            "context_length": 77,
            "vocab_size": 49408,
            "width": 64,
            "heads": 2,
            "layers": 2,
        },
    },
}

logger = logging.getLogger(__name__)

_PRECISIONS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_config_lock = threading.Lock()


def register_tiny_config(name: str) -> None:
    """Make one of :data:`TINY_CONFIGS` known to open_clip (idempotent, thread-safe).

    ``open_clip.add_model_config`` only reads JSON files, so the config is written to a temporary
    file, registered, and the file removed: open_clip keeps parsed configs in memory and its
    rescans skip paths that no longer exist.
    """
    with _config_lock:
        if name in open_clip.list_models():
            return
        with tempfile.TemporaryDirectory(prefix="genloop-clip-") as folder:
            path = Path(folder) / f"{name}.json"
            path.write_text(json.dumps(TINY_CONFIGS[name]))
            open_clip.add_model_config(path)


class OpenClipEvaluator(EmbeddingEvaluator):
    """CLIP score from an open_clip model; see :mod:`genloop.evaluators.embedding` for the formula.

    ``device=None`` picks CUDA when present; ``dtype=None`` picks fp16 on CUDA and fp32 on CPU.
    ``seed`` only matters when ``pretrained`` is None (random weights).
    """

    def __init__(
        self,
        model: str = "tiny-clip-v1",
        pretrained: str | None = None,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        seed: int = 0,
        batch_size: int = 64,
        text_cache_size: int = 1024,
    ) -> None:
        resolved = resolve_device(device)
        super().__init__(
            device=resolved,
            dtype=resolve_dtype(resolved, dtype),
            batch_size=batch_size,
            text_cache_size=text_cache_size,
        )
        if self.dtype not in _PRECISIONS:
            raise Permanent(f"dtype {self.dtype} not supported; use one of {list(_PRECISIONS)}")
        if model in TINY_CONFIGS:
            register_tiny_config(model)
        self.model_name = model
        self.pretrained = pretrained
        self.identity = _identity(model, pretrained, seed)
        started = time.perf_counter()
        try:
            # Random initialisation draws from the global generator; fork it so that building a
            # judge neither depends on nor disturbs the caller's random state.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                clip, _, preprocess = open_clip.create_model_and_transforms(
                    model,
                    pretrained=pretrained,
                    precision=_PRECISIONS[self.dtype],
                    device=self.device,
                )
            self.tokenizer = open_clip.get_tokenizer(model)
        # A checkpoint of another architecture fails open_clip's own shape asserts
        # (AssertionError: "text pos_embed width changed!") or load_state_dict (RuntimeError).
        except (RuntimeError, FileNotFoundError, ValueError, AssertionError) as exc:
            raise Permanent(
                f"cannot load open_clip model {model!r} ({pretrained=}): {exc}"
            ) from exc
        self.model = clip.eval()
        self.embed_dim = getattr(clip.visual, "output_dim", None)
        logger.info(
            "loaded %s on %s (%s) in %.2fs",
            self.identity,
            self.device,
            self.dtype,
            time.perf_counter() - started,
        )
        self.preprocess = preprocess

    def _encode_images(self, images: list[Image.Image]) -> torch.Tensor:
        pixels = torch.stack([self.preprocess(image) for image in images])
        return self.model.encode_image(pixels.to(self.device, self.dtype))

    def _encode_texts(self, texts: list[str]) -> torch.Tensor:
        return self.model.encode_text(self.tokenizer(texts).to(self.device))


def _identity(model: str, pretrained: str | None, seed: int) -> str:
    if model.startswith("local-dir:"):
        return f"clip:{model}@{fingerprint(model.removeprefix('local-dir:'))}"
    if pretrained is None:
        if model in TINY_CONFIGS:
            return f"clip:{model}" if seed == 0 else f"clip:{model}/seed{seed}"
        return f"clip:{model}/random-seed{seed}"
    if os.path.isfile(pretrained):
        return f"clip:{model}/sha256:{fingerprint(pretrained)}"
    return f"clip:{model}/{pretrained}"
