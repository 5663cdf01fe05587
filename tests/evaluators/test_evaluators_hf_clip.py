"""The transformers CLIP back end, with torchmetrics' clip_score as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchmetrics.functional.multimodal import clip_score
from transformers import CLIPModel, CLIPProcessor

from genloop.evaluators import HFClipEvaluator
from genloop.sdk.errors import Permanent

PROMPTS = ["a red square", "a photo of a dog", "blue sky", "an astronaut riding a horse"]


class _FeaturesAsTensors(torch.nn.Module):
    """torchmetrics 1.9 normalises ``get_*_features`` output as a tensor, but transformers 5
    returns a ``BaseModelOutputWithPooling``. This shim hands torchmetrics ``pooler_output`` (the
    projected features) and changes nothing else: processor, cosine, scaling and clamp stay
    torchmetrics' own."""

    def __init__(self, model: CLIPModel) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def get_image_features(self, *args, **kwargs):
        out = self.model.get_image_features(*args, **kwargs)
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    def get_text_features(self, *args, **kwargs):
        out = self.model.get_text_features(*args, **kwargs)
        return out if isinstance(out, torch.Tensor) else out.pooler_output


def test_per_image_score_equals_torchmetrics_clip_score(hf_clip_dir, images):
    # Given the saved tiny CLIP judge, loaded by genloop and (separately) for torchmetrics
    judge = HFClipEvaluator(hf_clip_dir, device="cpu")
    model = CLIPModel.from_pretrained(hf_clip_dir).eval()
    processor = CLIPProcessor.from_pretrained(hf_clip_dir)
    oracle = []
    ours = []
    for prompt in PROMPTS:
        # When genloop scores the batch and torchmetrics scores each image alone
        ours += judge.score(images, prompt).values
        for image in images:
            pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1)
            with torch.no_grad():
                ref = clip_score(pixels, prompt, lambda: (_FeaturesAsTensors(model), processor))
            oracle.append(float(ref))
    # Then they agree per image, and both positive scores and clamped zeros were compared
    assert ours == pytest.approx(oracle, abs=1e-4)
    assert sum(v > 1 for v in oracle) >= 5 and sum(v == 0 for v in oracle) >= 5


def test_torchmetrics_clamps_the_batch_mean_not_each_score(hf_clip_dir, images):
    # Documented difference: torchmetrics on a batch returns max(mean(100 * cos), 0).
    judge = HFClipEvaluator(hf_clip_dir, device="cpu")
    model = CLIPModel.from_pretrained(hf_clip_dir).eval()
    processor = CLIPProcessor.from_pretrained(hf_clip_dir)
    batch = [torch.from_numpy(np.array(im.resize((48, 40)))).permute(2, 0, 1) for im in images]
    with torch.no_grad():
        batch_score = clip_score(
            batch,
            ["an astronaut riding a horse"] * len(batch),
            lambda: (_FeaturesAsTensors(model), processor),
        )
    ours = judge.score([im.resize((48, 40)) for im in images], "an astronaut riding a horse").values
    # Most cosines are negative: their mean clamps to 0, while the few positive images keep
    # their own (positive) scores here.
    assert float(batch_score) == 0.0
    assert sum(v > 0.5 for v in ours) >= 2 and sum(v == 0 for v in ours) >= 4


def test_prompt_cache_and_identity(hf_clip_dir, images):
    judge = HFClipEvaluator(hf_clip_dir, device="cpu")
    judge.score(images, "blue sky")
    judge.score(images[:2], "blue sky")
    assert judge.texts_encoded == 1
    assert judge.identity.startswith(f"hf-clip:{hf_clip_dir.name}@")
    assert judge.identity == HFClipEvaluator(hf_clip_dir, device="cpu").identity


def test_missing_folder_is_permanent(tmp_path):
    with pytest.raises(Permanent, match="no model folder"):
        HFClipEvaluator(tmp_path / "absent", device="cpu")
    with pytest.raises(Permanent, match="needs path"):
        HFClipEvaluator(device="cpu")
    with pytest.raises(Permanent, match="cannot load"):
        HFClipEvaluator(tmp_path, device="cpu")
