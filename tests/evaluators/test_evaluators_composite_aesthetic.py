"""The aesthetic head on CLIP embeddings, and weighted composites of evaluators."""

from __future__ import annotations

import pytest
import torch

from genloop.evaluators import AestheticEvaluator, CompositeEvaluator, OpenClipEvaluator, evaluator
from genloop.sdk.errors import Permanent


def laion_style_head(in_features: int, seed: int = 0) -> torch.nn.Sequential:
    """The improved-aesthetic-predictor layout: Linear/Dropout pairs, then Linear(16, 1)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(
            torch.nn.Linear(in_features, 16),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(16, 8),
            torch.nn.Dropout(0.1),
            torch.nn.Linear(8, 1),
        ).eval()


@pytest.fixture
def head_path(tmp_path):
    path = tmp_path / "aesthetic.pth"
    torch.save({f"layers.{k}": v for k, v in laion_style_head(32).state_dict().items()}, path)
    return path


def test_aesthetic_is_the_head_on_normalised_clip_embeddings(clip_judge, head_path, images):
    # Given a LAION-style MLP head saved as a state dict
    judge = AestheticEvaluator(clip_judge, head_path)
    # When images are rated (the prompt is ignored, so it may be empty)
    scores = judge.score(images, "")
    # Then each rating is the head applied to the unit CLIP embedding, which is returned too
    embeddings = clip_judge.embed_images(images)
    with torch.no_grad():
        expected = laion_style_head(32)(embeddings).squeeze(-1)
    assert scores.values == pytest.approx(expected.tolist(), abs=1e-5)
    assert torch.allclose(torch.tensor(scores.embeddings), embeddings, atol=1e-6)
    assert judge.identity.endswith("+clip:tiny-clip-v1")


def test_linear_head_and_safetensors(clip_judge, tmp_path, images):
    from safetensors.torch import save_file

    linear = torch.nn.Linear(32, 1)
    path = tmp_path / "linear.safetensors"
    save_file(linear.state_dict(), str(path))
    scores = AestheticEvaluator(clip_judge, path).score(images, "")
    with torch.no_grad():
        expected = linear(clip_judge.embed_images(images)).squeeze(-1)
    assert scores.values == pytest.approx(expected.tolist(), abs=1e-5)


def test_head_of_the_wrong_size_is_refused(clip_judge, tmp_path):
    path = tmp_path / "vit-l.pth"
    torch.save(torch.nn.Linear(768, 1).state_dict(), path)
    with pytest.raises(Permanent, match="size 768 but clip:tiny-clip-v1 makes size 32"):
        AestheticEvaluator(clip_judge, path)


def test_unreadable_or_missing_head_is_permanent(clip_judge, tmp_path):
    garbage = tmp_path / "head.pth"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(Permanent, match="not a readable state dict"):
        AestheticEvaluator(clip_judge, garbage)
    with pytest.raises(Permanent, match="not found"):
        AestheticEvaluator(clip_judge, tmp_path / "absent.pth")


def test_aesthetic_from_the_registry(registry, head_path, images):
    judge = registry.get("aesthetic", "cpu", head=str(head_path))
    assert judge.backbone is registry.get("clip", "cpu")  # the backbone is shared, not reloaded
    with pytest.raises(Permanent, match="needs head"):
        registry.get("aesthetic", "cpu")


def test_composite_is_the_weighted_sum_of_its_parts(registry, head_path, images):
    # Given CLIP and an aesthetic head, and a user judge
    @evaluator("width", needs_text=False, registry=registry)
    def width(batch, text):
        return [float(im.width) for im in batch]

    weights = {"clip": 0.7, "aesthetic": 2.0, "width": 0.01}
    judge = registry.get(
        "composite", "cpu", weights=weights, options={"aesthetic": {"head": str(head_path)}}
    )
    # When the composite scores a batch
    scores = judge.score(images, "a red square")
    # Then each value is sum(weight * part score), and the CLIP embeddings are passed through
    clip = registry.get("clip", "cpu").score(images, "a red square")
    aesthetic = registry.get("aesthetic", "cpu", head=str(head_path)).score(images, "")
    expected = [
        0.7 * c + 2.0 * a + 0.01 * im.width
        for c, a, im in zip(clip.values, aesthetic.values, images, strict=True)
    ]
    assert scores.values == pytest.approx(expected, abs=1e-4)
    assert scores.embeddings == clip.embeddings
    assert judge.identity.startswith("composite(0.7*clip:tiny-clip-v1,2*aesthetic:")


def test_zero_weight_parts_are_not_loaded(registry):
    judge = registry.get("composite", "cpu", weights={"clip": 1.0, "hf-clip": 0.0})
    assert [p.identity for p, _ in judge.parts] == ["clip:tiny-clip-v1"]


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ({}, "needs weights"),
        ({"clip": -1.0}, ">= 0"),
        ({"clip": 0.0}, "all composite weights are zero"),
        ({"clip": float("nan")}, "finite number"),
        ({"clip": "1"}, "finite number"),
        ({"clip": 1.0, "pickscore": 1.0}, r"unknown evaluators \['pickscore'\]"),
    ],
)
def test_bad_weights_are_permanent(registry, weights, match):
    with pytest.raises(Permanent, match=match):
        registry.get("composite", "cpu", weights=weights)


def test_composite_of_instances(clip_judge, images):
    other = OpenClipEvaluator("tiny-clip-v1", device="cpu", seed=3)
    judge = CompositeEvaluator([(clip_judge, 1.0), (other, 1.0)])
    a, b = clip_judge.score(images, "noise"), other.score(images, "noise")
    assert judge.score(images, "noise").values == pytest.approx(
        [x + y for x, y in zip(a.values, b.values, strict=True)], abs=1e-4
    )
    with pytest.raises(Permanent, match="empty"):
        judge.score(images, "")
