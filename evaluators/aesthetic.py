"""A LAION-style aesthetic predictor: a small head on CLIP image embeddings.

LAION's predictors (the linear ``sa_0_4_*_linear.pth`` and the "improved" MLP) map an
L2-normalised CLIP image embedding to a rating of roughly 1..10, ignoring the prompt. Both are
stacks of ``nn.Linear`` layers with nothing between them but dropout, which is inert at
inference, so any state dict of chained linear layers loads here:

    {"weight", "bias"}                                   one Linear (the linear predictor)
    {"layers.0.weight", "layers.0.bias", "layers.2...."}  a Sequential of Linear and Dropout

The head must match the backbone's embedding size (768 for the ViT-L/14 the LAION heads were
trained on); a mismatch is refused rather than silently producing noise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from genloop.sdk.errors import Permanent
from genloop.workers.models.fingerprint import fingerprint

from .base import Evaluator, Scores, check_finite
from .embedding import EmbeddingEvaluator

if TYPE_CHECKING:
    from .registry import EvaluatorRegistry


def load_head(path: str | Path) -> torch.nn.Sequential:
    """Build the head from a ``.pth``/``.pt``/``.safetensors`` state dict of chained Linears."""
    path = Path(path)
    if not path.is_file():
        raise Permanent(f"aesthetic head not found at {str(path)!r}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many unrelated types on a foreign file
        raise Permanent(
            f"aesthetic head {str(path)!r} is not a readable state dict: {exc}"
        ) from exc
    if not isinstance(state, dict) or not state:
        raise Permanent(f"aesthetic head {str(path)!r} holds no state dict")

    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.items():
        prefix, _, leaf = key.rpartition(".")
        groups.setdefault(prefix, {})[leaf] = tensor
    layers: list[torch.nn.Linear] = []
    for prefix in sorted(groups, key=_natural_key):
        params = groups[prefix]
        weight = params.get("weight")
        if weight is None or weight.ndim != 2 or set(params) - {"weight", "bias"}:
            raise Permanent(
                f"aesthetic head layer {prefix!r} is not a Linear layer: {sorted(params)}"
            )
        if layers and layers[-1].out_features != weight.shape[1]:
            raise Permanent(
                "aesthetic head layers do not chain: "
                f"{layers[-1].out_features} -> {weight.shape[1]}"
            )
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in params)
        linear.load_state_dict(params)
        layers.append(linear)
    if layers[-1].out_features != 1:
        raise Permanent(f"aesthetic head must end in one output, not {layers[-1].out_features}")
    return torch.nn.Sequential(*layers).eval()


class AestheticEvaluator(Evaluator):
    """Rates images with ``head(normalised backbone image embedding)``; the prompt is ignored."""

    needs_text = False

    def __init__(self, backbone: Evaluator, head: str | Path) -> None:
        if not isinstance(backbone, EmbeddingEvaluator):
            raise Permanent(f"aesthetic needs a CLIP-family backbone, got {backbone.identity}")
        self.backbone = backbone
        self.device = backbone.device
        self.head = load_head(head).to(backbone.device)
        self.input_size = self.head[0].in_features
        if backbone.embed_dim is not None:
            self._check_size(backbone.embed_dim)
        self.identity = f"aesthetic:{fingerprint(head)}+{backbone.identity}"

    @classmethod
    def from_registry(
        cls,
        registry: EvaluatorRegistry,
        device: str,
        *,
        head: str | Path | None = None,
        backbone: str = "clip",
        backbone_options: dict[str, Any] | None = None,
    ) -> AestheticEvaluator:
        """``get_evaluator("aesthetic", head=path, backbone="clip", backbone_options={...})``."""
        if head is None:
            raise Permanent("aesthetic needs head=<path to the predictor's state dict>")
        return cls(registry.get(backbone, device, **(backbone_options or {})), head)

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        embeddings = self.backbone.embed_images(images)
        self._check_size(embeddings.shape[1])
        with torch.inference_mode():
            values = self.head(embeddings).squeeze(-1).cpu().tolist()
        check_finite(values)
        return Scores(values=values, embeddings=embeddings.cpu().tolist(), evaluator=self.identity)

    def _check_size(self, size: int) -> None:
        if size != self.input_size:
            raise Permanent(
                f"aesthetic head takes embeddings of size {self.input_size} but "
                f"{self.backbone.identity} makes size {size}; pick a matching backbone"
            )


def _natural_key(text: str) -> list[object]:
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text)]
