"""The shapes data set is a pure function of the seed, and its captions parse both ways."""

from __future__ import annotations

import numpy as np
import pytest

from genloop.workers.shapes import dataset


def test_same_seed_gives_same_sample() -> None:
    # Given two draws of the same seeds
    first = [dataset.sample(s) for s in range(20)]
    second = [dataset.sample(s) for s in range(20)]
    # Then pixels and captions are identical
    for a, b in zip(first, second, strict=True):
        assert a.caption == b.caption
        assert np.array_equal(dataset.to_array(a.image), dataset.to_array(b.image))


def test_samples_are_32x32_rgb_and_vary_with_seed() -> None:
    images = [dataset.to_array(dataset.sample(s).image) for s in range(10)]
    assert all(im.shape == (32, 32, 3) for im in images)
    assert len({im.tobytes() for im in images}) == 10


def test_attributes_cover_the_vocabulary() -> None:
    seen = [dataset.sample(s).attributes for s in range(400)]
    assert {a.colour for a in seen} == set(dataset.COLOURS)
    assert {a.shape for a in seen} == set(dataset.SHAPES)
    assert {a.size for a in seen} == set(dataset.SIZES)
    assert {a.position for a in seen} == set(dataset.POSITIONS)
    assert {a.background for a in seen} == set(dataset.BACKGROUNDS)
    assert len(dataset.COLOURS) >= 6 and len(dataset.SHAPES) >= 4


def test_caption_round_trip_and_reference_phrase() -> None:
    text = "a large red circle in the centre, black background"
    attrs = dataset.parse_caption(text)
    assert attrs == dataset.Attributes(
        colour="red", shape="circle", size="large", position="centre", background="black")
    assert attrs.caption() == text
    for s in range(50):
        sample = dataset.sample(s)
        assert dataset.parse_caption(sample.caption) == sample.attributes


def test_parse_rejects_other_text_with_a_hint() -> None:
    with pytest.raises(ValueError, match="expected e.g."):
        dataset.parse_caption("a photo of a cat")


def test_heldout_seeds_are_disjoint_from_training_seeds() -> None:
    held = dataset.heldout_seeds(100)
    assert min(held) >= dataset.HELDOUT_SEED_START
    assert len(set(held)) == 100
    train = dataset.train_seeds()
    assert [next(train) for _ in range(3)] == [0, 1, 2]


def test_one_attribute_variants_change_exactly_that_attribute() -> None:
    attrs = dataset.sample(7).attributes
    variants = dataset.one_attribute_variants(attrs, "colour")
    assert len(variants) == len(dataset.COLOURS) - 1
    for v in variants:
        assert v.colour != attrs.colour
        assert v.model_copy(update={"colour": attrs.colour}) == attrs
