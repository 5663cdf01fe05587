"""The shapes data set is a pure function of the seed, its captions parse both ways (one and two
objects), and held-out combinations never reach training data."""

from __future__ import annotations

import numpy as np
import pytest

from genloop.shapes import dataset
from genloop.shapes.scene import Pair, Thing


def test_same_seed_gives_same_sample() -> None:
    # Given two draws of the same seeds, one and two objects
    for objects in (1, 2):
        first = [dataset.sample(s, objects) for s in range(10)]
        second = [dataset.sample(s, objects) for s in range(10)]
        # Then pixels and captions are identical
        for a, b in zip(first, second, strict=True):
            assert a.caption == b.caption
            assert np.array_equal(dataset.to_array(a.image), dataset.to_array(b.image))


def test_samples_are_64x64_rgb_and_vary_with_seed() -> None:
    images = [dataset.to_array(dataset.training_sample(s).image) for s in range(10)]
    assert all(im.shape == (64, 64, 3) for im in images)
    assert len({im.tobytes() for im in images}) == 10


def test_attributes_cover_the_vocabulary() -> None:
    seen = [dataset.sample(s).attributes for s in range(400)]
    assert {a.colour for a in seen} == set(dataset.COLOURS)
    assert {a.shape for a in seen} == set(dataset.SHAPES)
    assert {a.position for a in seen} == set(dataset.POSITIONS)
    assert {a.background for a in seen} == set(dataset.BACKGROUNDS)
    pairs = [dataset.sample(s, 2).attributes for s in range(200)]
    assert {p.relation for p in pairs} == set(dataset.RELATIONS)


def test_training_mix_holds_both_kinds_and_no_heldout_combination() -> None:
    scenes = [dataset.training_sample(s).attributes for s in range(600)]
    kinds = {len(s.things) for s in scenes}
    assert kinds == {1, 2}
    assert not any(dataset.is_novel(s) for s in scenes)
    with pytest.raises(ValueError, match="held out"):
        dataset.training_sample(dataset.HELDOUT_SEED_START)


def test_novel_prompts_all_hold_a_heldout_combination() -> None:
    for objects in (1, 2):
        novel = dataset.novel_prompts(20, objects=objects)
        assert len(novel) == 20 and all(dataset.is_novel(s) for s in novel)
        assert all(len(s.things) == objects for s in novel)


def test_caption_round_trip_one_and_two_objects() -> None:
    text = "a large red circle in the centre, black background"
    attrs = dataset.parse_caption(text)
    assert attrs == dataset.Attributes(
        colour="red", shape="circle", size="large", position="centre", background="black")
    assert attrs.caption() == text
    pair_text = "a small red star left of a large blue square, white background"
    pair = dataset.parse_caption(pair_text)
    assert pair == Pair(first=Thing(colour="red", shape="star", size="small"),
                        relation="left of",
                        second=Thing(colour="blue", shape="square", size="large"),
                        background="white")
    assert pair.caption() == pair_text
    for s in range(30):
        for objects in (1, 2):
            sample = dataset.sample(s, objects)
            assert dataset.parse_caption(sample.caption) == sample.attributes


def test_converse_says_the_same_picture() -> None:
    pair = dataset.parse_caption("a small red star left of a large blue square, white background")
    assert pair.converse().caption() == (
        "a large blue square right of a small red star, white background")
    assert pair.converse().canonical() == pair.canonical()


def test_parse_rejects_other_text_with_a_hint() -> None:
    with pytest.raises(ValueError, match="expected e.g."):
        dataset.parse_caption("a photo of a cat")


def test_heldout_seeds_are_disjoint_from_training_seeds() -> None:
    held = dataset.heldout_seeds(100)
    assert min(held) >= dataset.HELDOUT_SEED_START
    assert len(set(held)) == 100
    train = dataset.train_seeds()
    assert [next(train) for _ in range(3)] == [0, 1, 2]
    assert all(len(p.things) == 2 for p in dataset.heldout_prompts(5, objects=2))


def test_one_attribute_variants_change_exactly_that_attribute() -> None:
    attrs = dataset.sample(7).attributes
    variants = dataset.one_attribute_variants(attrs, "colour")
    assert len(variants) == len(dataset.COLOURS) - 1
    for v in variants:
        assert v.colour != attrs.colour
        assert v.model_copy(update={"colour": attrs.colour}) == attrs


def test_pair_variants_are_true_negatives() -> None:
    red_star = Thing(colour="red", shape="star", size="small")
    pair = Pair(first=red_star, relation="left of",
                second=Thing(colour="blue", shape="square", size="large"), background="gray")
    # Swapping the objects is a different picture; so is any other relation
    assert [v.caption() for v in dataset.one_attribute_variants(pair, "order")] == [
        "a large blue square left of a small red star, gray background"]
    assert len(dataset.one_attribute_variants(pair, "relation")) == 3
    # Between identical objects "left of" and "right of" are the same picture: not a negative
    twins = Pair(first=red_star, relation="left of", second=red_star, background="gray")
    assert [v.relation for v in dataset.one_attribute_variants(twins, "relation")] == [
        "above", "below"]
    assert dataset.one_attribute_variants(twins, "order") == []
    with pytest.raises(ValueError, match="two-object clauses"):
        dataset.one_attribute_variants(pair, "position")
