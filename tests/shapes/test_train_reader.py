"""train_reader's smoke config runs end to end (draw, read, train, save) and its weights load
into the shapes-reader judge; its labels are the checker's readings, mirrored images read
again, and no held-out colour-shape pair is ever among them."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from genloop import shapes
from genloop.evaluators.reader import ShapesReader
from genloop.evaluators.reader_model import HEAD_NAMES, targets
from genloop.shapes import dataset
from genloop.shapes.scene import SHAPES
from genloop.shapes.training.train_reader import ReaderTrainConfig, label, run

CAPTION = "a large red circle in the centre, black background"


def test_labels_are_the_checkers_readings_of_each_image_and_its_mirror():
    scene = shapes.parse_caption("a small red star left of a large blue square, gray background")
    image = np.asarray(dataset.render(scene))

    labelled = label(image[None], [7])

    mirror = dataset.render(scene).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    first, second = labelled.labels
    assert (first == targets(shapes.read(dataset.render(scene)))).all()
    assert (second == targets(shapes.read(mirror))).all()
    # The pair slots go left to right: the star, then the square; mirrored, the other way.
    shape = HEAD_NAMES.index("p.shape")
    assert (SHAPES[first[shape]], SHAPES[second[shape]]) == ("star", "square")
    assert labelled.group.tolist() == [7, 7] and labelled.dropped == 0


def test_an_image_showing_a_held_out_pair_is_dropped_whatever_its_prompt():
    novel = shapes.novel_prompts(1)[0]
    image = np.asarray(dataset.render(novel))

    labelled = label(np.stack([image, np.asarray(dataset.render(shapes.parse_caption(CAPTION)))]),
                     [0, 1])

    assert labelled.dropped == 2 and labelled.group.tolist() == [1, 1]


def test_the_smoke_config_trains_and_saves_weights_the_judge_loads(tmp_path):
    report = run(tmp_path, ReaderTrainConfig.smoke())

    judge = ShapesReader(tmp_path / "shapes-reader" / "model.safetensors", device="cpu")
    scores = judge.score([dataset.render(shapes.parse_caption(CAPTION))], CAPTION)

    saved = json.loads((tmp_path / "reader-report.json").read_text())
    assert saved["images"] == report.images > 8
    assert set(report.valid_accuracy) <= set(HEAD_NAMES)
    assert 0 <= scores.values[0] <= 100 and scores.details[0].weakest in shapes.ATTRIBUTE_NAMES
