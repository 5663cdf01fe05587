"""The reader's boundary drawings: an outline at either end is the shape itself, part way it is
neither; drawings are a pure function of a training seed, in colours no shape is held out
with, and the checker reads anything from a lone speck (no object) to three objects in them;
the last share of them validates, as of the other sources."""

from __future__ import annotations

import random

import numpy as np
import pytest

from genloop.shapes import dataset
from genloop.shapes.checker import read
from genloop.shapes.scene import SHAPES
from genloop.shapes.training import boundary
from genloop.shapes.training.train_reader import ReaderTrainConfig, valid_rows
from genloop.shapes.training.vqa_data import VqaDataConfig


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.minimum(a, b).sum() / np.maximum(a, b).sum())


@pytest.mark.parametrize("shape", SHAPES)
def test_an_outline_at_either_end_is_the_shape_and_part_way_is_neither(shape):
    other = next(s for s in SHAPES if s != shape)
    drawn = {t: dataset.polygon_coverage(boundary.outline((shape, other), t, 30.4, 33.1, 10.0))
             for t in (0.0, 0.5, 1.0)}

    ends = [dataset.coverage(s, 30.4, 33.1, 10.0) for s in (shape, other)]

    # Not exactly 1: PIL rasterises an edge cut into 3-degree pieces a little differently.
    assert _iou(drawn[0.0], ends[0]) > 0.95 and _iou(drawn[1.0], ends[1]) > 0.95
    apart = _iou(*ends)
    assert apart < _iou(drawn[0.5], drawn[0.0]) < 0.95
    assert apart < _iou(drawn[0.5], drawn[1.0]) < 0.95


def test_drawings_are_a_pure_function_of_a_training_seed():
    assert (boundary.boundary_pool([5, 6]) == boundary.boundary_pool([5, 6])).all()
    assert not (boundary.boundary_pool([5]) == boundary.boundary_pool([6])).all()
    with pytest.raises(ValueError, match="not a training seed"):
        boundary.boundary_drawing(dataset.HELDOUT_SEED_START)


def test_objects_are_drawn_only_in_colours_no_shape_is_held_out_with():
    blends = [boundary.blend(random.Random(seed)) for seed in range(500)]
    held_out_colours = {colour for colour, _ in dataset.HELDOUT_COMBOS}

    assert all(a != b for (a, b), _ in blends)
    assert {colour for _, colour in blends} == set(dataset.COLOURS) - held_out_colours
    assert len({pair for pair, _ in blends}) == 4 * 3


def test_the_checker_reads_from_none_to_three_objects_and_every_shape_in_drawings():
    readings = [read(boundary.boundary_drawing(s)) for s in range(300)]
    counts = {len(r.objects) for r in readings}

    # None: a speck below the checker's minimum region, alone.
    assert counts == {0, 1, 2, 3}
    assert {o.thing.shape for r in readings for o in r.objects} == set(SHAPES)


def test_the_last_share_of_each_source_validates():
    cfg = ReaderTrainConfig(data=VqaDataConfig(prompts=20), renders=10, boundary=40,
                            valid_share=0.1)
    group = np.arange(70)

    valid = valid_rows(group, cfg)

    assert np.flatnonzero(valid).tolist() == [18, 19, 29, *range(66, 70)]
