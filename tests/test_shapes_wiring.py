"""The shapes models plugged into genloop's registries: ``shapes-clip`` by name, and a loop on
``shapes`` whose best image the pixel checker can grade."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from genloop import shapes
from genloop.evaluators import get_evaluator
from genloop.sdk import Loop, RunStatus

pytestmark = pytest.mark.skipif(
    not shapes.clip_checkpoint_path().exists() or not shapes.pipeline_path().exists(),
    reason="shapes weights are not in this checkout",
)


def test_shapes_clip_prefers_the_true_caption_of_a_render():
    judge = get_evaluator("shapes-clip", device="cpu")
    wins = 0
    for seed in shapes.heldout_seeds(10):
        s = shapes.sample(seed)
        wrong = s.attributes.model_copy(
            update={"colour": next(c for c in ("red", "blue") if c != s.attributes.colour)})
        true, false = (judge.score([s.image], text).values[0]
                       for text in (s.caption, wrong.caption()))
        wins += true > false
    assert judge.identity.startswith("clip:shapes-clip/sha256:")
    assert wins >= 8


@pytest.mark.slow
def test_a_shapes_loop_finds_an_image_of_the_right_colour(client):
    prompt = "a large red circle in the centre, black background"
    result = client.submit(Loop(prompt=prompt, candidates=4, rounds=2, model="shapes",
                                evaluator="shapes-clip")).wait(timeout=600)

    assert result.status == RunStatus.SUCCEEDED
    best = Image.open(io.BytesIO(client.read_artifact(result.best.artifact)))
    assert shapes.check(best).colour == "red"
