"""Evaluator options on the score op: brand colours scored inside a loop, as part of the result
key, and options that a factory does not take failing the node at once."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from genloop.evaluators.palette import palette_compliance, parse_colour
from genloop.sdk import Client, Loop
from genloop.sdk.ops import ScoreParams

# Colours the tiny model's (noise) images hold some of, in different shares per image.
REDS, GREENS = ["#a86f7e", "#b04a6f"], ["#899886", "#8ab583"]


@pytest.fixture
def local(tmp_path, resources):
    with Client.local(home=tmp_path / "home", threads=4, resources=resources) as client:
        yield client


def palette_loop(palette: list[str], **fields) -> Loop:
    return Loop(prompt="a red sneaker on grass", model="tiny", rounds=1, candidates=3, steps=2,
                evaluator="brand-palette", evaluator_options={"palette": palette}, **fields)


def compliance(client: Client, artifact: str, palette: list[str]) -> float:
    image = Image.open(io.BytesIO(client.read_artifact(artifact))).convert("RGB")
    return 100 * palette_compliance(image, [parse_colour(c) for c in palette])


def test_a_loop_scores_with_the_palette_it_names_and_another_palette_is_another_result(local):
    reds = local.submit(palette_loop(REDS)).wait()
    greens = local.submit(palette_loop(GREENS)).wait()
    assert reds.status.value == "succeeded" and greens.status.value == "succeeded"
    # Same images (same prompt, seeds, model), each scored against its own palette: had the
    # options been left out of the result key, the second loop would reuse the first's scores.
    assert [c.artifact for c in reds.scored] == [c.artifact for c in greens.scored]
    for result, palette in ((reds, REDS), (greens, GREENS)):
        assert [c.score for c in result.scored] == pytest.approx(
            [compliance(local, c.artifact, palette) for c in result.scored], abs=1e-6)
    assert all(0 < c.score < 100 for c in reds.scored + greens.scored)
    assert [c.score for c in reds.scored] != [c.score for c in greens.scored]


def test_brand_palette_joins_a_composite_score(local):
    weights = {"clip": 1.0, "brand-palette": 0.5}
    loop = Loop(prompt="a red sneaker on grass", model="tiny", rounds=1, candidates=2, steps=2,
                evaluator="composite", evaluator_options={
                    "weights": weights, "options": {"brand-palette": {"palette": REDS}}})
    clip_only = loop.model_copy(update={"evaluator": "clip", "evaluator_options": None})
    mixed = local.submit(loop).wait()
    plain = local.submit(clip_only).wait()
    for m, p in zip(mixed.scored, plain.scored, strict=True):
        assert m.artifact == p.artifact
        assert m.score == pytest.approx(p.score + 0.5 * compliance(local, m.artifact, REDS),
                                        abs=1e-4)


def test_options_a_factory_does_not_take_fail_the_node_without_retries(local):
    loop = Loop(prompt="p", model="tiny", rounds=1, candidates=1, steps=1, evaluator="clip",
                evaluator_options={"colours": ["red"]})
    result = local.submit(loop).wait(timeout=60)
    assert result.status.value == "failed"
    assert "evaluator 'clip' does not take options ['colours']" in result.failures[0].message


def test_without_options_the_params_dump_as_before_so_stored_scores_stay_valid():
    assert ScoreParams(text="p", evaluator="clip").model_dump(mode="json") == {
        "text": "p", "evaluator": "clip"}
    assert ScoreParams(text="p", options={"palette": REDS}).model_dump(mode="json")["options"] \
        == {"palette": REDS}
