"""The open_clip back end: the score formula, batching, the prompt cache, identity, dtype."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from genloop.evaluators import OpenClipEvaluator, Scores
from genloop.sdk.errors import Permanent, Transient


def hand_scores(judge: OpenClipEvaluator, images, text: str) -> torch.Tensor:
    """CLIP score computed directly from open_clip's encode_image / encode_text, one at a time."""
    with torch.no_grad():
        out = []
        for image in images:
            pixels = judge.preprocess(image).unsqueeze(0)
            image_row = judge.model.encode_image(pixels)
            text_row = judge.model.encode_text(judge.tokenizer([text]))
            cos = torch.nn.functional.cosine_similarity(image_row, text_row).item()
            out.append(100 * max(cos, 0.0))
    return torch.tensor(out)


@pytest.mark.parametrize("text", ["a red square", "an astronaut riding a horse", "noise"])
def test_score_matches_hand_computation_from_encoders(clip_judge, images, text):
    # Given the tiny open_clip judge and eight images
    # When they are scored in one batched call
    scores = clip_judge.score(images, text)
    # Then each score is 100 * max(cos, 0) of that image's own embedding and the prompt's
    expected = hand_scores(clip_judge, images, text)
    assert torch.allclose(torch.tensor(scores.values), expected, atol=1e-4, rtol=0)
    assert isinstance(scores, Scores) and scores.evaluator == "clip:tiny-clip-v1"


def test_scores_contain_positive_values_and_clamped_zeros(clip_judge, images):
    # Guards the test above against passing vacuously on all-zero scores.
    values = [
        v for t in ["a red square", "noise", "blue sky"] for v in clip_judge.score(images, t).values
    ]
    assert any(v > 1 for v in values) and any(v == 0 for v in values)


def test_embeddings_are_unit_image_embeddings(clip_judge, images):
    scores = clip_judge.score(images, "a red square")
    rows = torch.tensor(scores.embeddings)
    assert rows.shape == (len(images), 32)
    assert torch.allclose(rows.norm(dim=-1), torch.ones(len(images)), atol=1e-5)
    with torch.no_grad():
        direct = clip_judge.model.encode_image(clip_judge.preprocess(images[3]).unsqueeze(0))[0]
    assert torch.allclose(rows[3], direct / direct.norm(), atol=1e-5)


def test_batch_size_does_not_change_scores(clip_judge, images):
    small = OpenClipEvaluator("tiny-clip-v1", device="cpu", batch_size=3)
    assert small.score(images, "blue sky").values == pytest.approx(
        clip_judge.score(images, "blue sky").values, abs=1e-4
    )


def test_cached_prompt_is_not_encoded_again(images, monkeypatch):
    # Given a fresh judge whose text tower counts its calls
    judge = OpenClipEvaluator("tiny-clip-v1", device="cpu")
    calls = []
    original = judge.model.encode_text
    monkeypatch.setattr(
        judge.model, "encode_text", lambda tokens: calls.append(len(tokens)) or original(tokens)
    )
    # When the same prompt scores three batches and a new prompt one batch
    first = judge.score(images, "a red square")
    again = judge.score(images[:3], "a red square")
    judge.score(images[:2], "a red square")
    judge.score(images, "a blue circle")
    # Then the text tower ran once per distinct prompt, and cached results are the same numbers
    assert calls == [1, 1]
    assert judge.texts_encoded == 2
    assert (judge.text_cache.stats.hits, judge.text_cache.stats.misses) == (2, 2)
    assert again.values == pytest.approx(first.values[:3], abs=1e-5)
    assert judge.images_encoded == 8 + 3 + 2 + 8


def test_score_texts_encodes_each_image_once(images):
    judge = OpenClipEvaluator("tiny-clip-v1", device="cpu")
    prompts = ["a red square", "blue sky", "noise"]
    many = judge.score_texts(images, prompts)
    assert judge.images_encoded == len(images)
    for prompt, scores in zip(prompts, many, strict=True):
        assert scores.values == pytest.approx(judge.score(images, prompt).values, abs=1e-5)


def test_seeded_weights_are_deterministic_and_leave_global_rng_alone(clip_judge, images):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    other = OpenClipEvaluator("tiny-clip-v1", device="cpu")
    assert torch.rand(1) == before  # building a judge did not consume the caller's random stream
    assert other.score(images, "noise").values == clip_judge.score(images, "noise").values
    reseeded = OpenClipEvaluator("tiny-clip-v1", device="cpu", seed=1)
    assert reseeded.identity == "clip:tiny-clip-v1/seed1"
    assert (
        reseeded.score(images, "noise").embeddings != clip_judge.score(images, "noise").embeddings
    )


def test_cpu_runs_in_fp32(clip_judge):
    assert clip_judge.dtype == torch.float32
    assert next(clip_judge.model.parameters()).dtype == torch.float32


def test_empty_image_list_gives_empty_scores(clip_judge):
    assert clip_judge.score([], "a red square").values == []


@pytest.mark.parametrize("text", ["", "   ", None])
def test_empty_prompt_is_permanent(clip_judge, images, text):
    with pytest.raises(Permanent, match="prompt"):
        clip_judge.score(images, text)


def test_non_image_input_is_permanent(clip_judge, images):
    with pytest.raises(Permanent, match="image 1 is a bytes"):
        clip_judge.score([images[0], b"\x89PNG"], "a red square")


def test_unknown_architecture_is_permanent():
    with pytest.raises(Permanent, match="no-such-clip"):
        OpenClipEvaluator("no-such-clip", device="cpu")


def test_local_checkpoint_identity_follows_file_content(clip_judge, tmp_path, images):
    path = tmp_path / "tiny.pt"
    torch.save(clip_judge.model.state_dict(), path)
    loaded = OpenClipEvaluator("tiny-clip-v1", pretrained=str(path), device="cpu", seed=5)
    assert loaded.identity.startswith("clip:tiny-clip-v1/sha256:")
    assert loaded.score(images, "noise").values == pytest.approx(
        clip_judge.score(images, "noise").values, abs=1e-5
    )


def test_explicit_dtype_is_used(images, clip_judge):
    judge = OpenClipEvaluator("tiny-clip-v1", device="cpu", dtype=torch.bfloat16)
    assert judge.model.visual.conv1.weight.dtype == torch.bfloat16  # open_clip keeps some in fp32
    reference = clip_judge.score(images, "a red square").values
    assert judge.score(images, "a red square").values == pytest.approx(reference, abs=2.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_defaults_to_fp16_and_agrees_with_cpu(images, clip_judge):
    judge = OpenClipEvaluator("tiny-clip-v1")  # device None picks CUDA when present
    assert judge.device == "cuda" and judge.dtype == torch.float16
    scores = judge.score(images, "a red square")
    assert scores.values == pytest.approx(clip_judge.score(images, "a red square").values, abs=0.5)


def test_truncated_lazy_image_is_permanent(clip_judge, images, tmp_path):
    # A PIL image opened from a truncated file only fails when its pixels are read.
    path = tmp_path / "cut.png"
    images[6].save(path)
    path.write_bytes(path.read_bytes()[:200])
    lazy = Image.open(path)
    with pytest.raises(Permanent, match="could not be decoded"):
        clip_judge.score([images[0], lazy], "a red square")


def test_out_of_memory_is_transient(clip_judge, images, monkeypatch):
    def oom(pixels):
        raise torch.OutOfMemoryError("CUDA out of memory")

    judge = OpenClipEvaluator("tiny-clip-v1", device="cpu")
    monkeypatch.setattr(judge.model, "encode_image", oom)
    with pytest.raises(Transient, match="out of device memory"):
        judge.score(images, "a red square")
