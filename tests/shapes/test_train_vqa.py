"""train_vqa's smoke config runs end to end (draw, label, train, save) and its weights load
into the shapes-vqa judge; the questions it trains on carry the checker's answers."""

from __future__ import annotations

import json

from genloop import shapes
from genloop.evaluators.vqa import ShapesVqa
from genloop.evaluators.vqa_model import CLAUSES, QUESTION_SIZE, encode_question
from genloop.shapes import dataset
from genloop.shapes.training.train_vqa import VqaTrainConfig, run
from genloop.shapes.training.vqa_data import image_questions

CAPTION = "a large red circle in the centre, black background"


def test_a_clean_renders_own_questions_are_yes_and_its_variants_no():
    scene = shapes.parse_caption(CAPTION)

    asked = image_questions(CAPTION, dataset.render(scene))

    own = [truth for _, truth, mine in asked if mine]
    variants = [truth for _, truth, mine in asked if not mine]
    assert own == [True] * 5
    assert len(variants) == 5 + 3 + 1 + 4 + 2 and not any(variants)
    assert all(v.shape == (QUESTION_SIZE,) for v, _, _ in asked)


def test_a_one_object_question_carries_no_context():
    red, blue = (shapes.parse_caption(CAPTION.replace("red", c)) for c in ("red", "blue"))

    assert (encode_question(red, "shape") == encode_question(blue, "shape")).all()
    assert encode_question(red, "shape")[CLAUSES.index("shape")] == 1


def test_the_smoke_config_trains_and_saves_weights_the_judge_loads(tmp_path):
    report = run(tmp_path, VqaTrainConfig.smoke())

    judge = ShapesVqa(tmp_path / "shapes-vqa" / "model.safetensors", device="cpu")
    scores = judge.score([dataset.render(shapes.parse_caption(CAPTION))], CAPTION)

    saved = json.loads((tmp_path / "vqa-report.json").read_text())
    assert saved["images"] == report.images == 8 and report.questions > 8 * 5
    assert 0 <= scores.values[0] <= 100 and scores.details[0].weakest in shapes.ATTRIBUTE_NAMES
