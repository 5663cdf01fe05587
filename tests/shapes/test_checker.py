"""The checker grades every clause of clean renders (>= 99% each), one and two objects."""

from __future__ import annotations

from collections import Counter

import pytest
from PIL import Image, ImageOps

from genloop.shapes import check, compare, dataset, grade, read
from genloop.shapes.scene import Pair, Thing


def _failures(objects: int, n: int) -> tuple[Counter, int]:
    failures: Counter = Counter()
    for seed in dataset.heldout_seeds(n):
        s = dataset.sample(seed, objects)
        failures.update(k for k, ok in grade(s.attributes, s.image).clauses().items() if not ok)
    return failures, n


@pytest.mark.slow
@pytest.mark.parametrize("objects", [1, 2])
def test_checker_reads_every_clause_of_clean_renders(objects: int) -> None:
    # Given 400 held-out clean renders; When the checker grades each against its caption
    failures, n = _failures(objects, 400)
    # Then every clause (attributes, relation, background, object count) is right >= 99%
    assert all(count / n <= 0.01 for count in failures.values()), failures


@pytest.mark.slow
def test_checker_reads_heldout_combinations_too() -> None:
    scenes = dataset.novel_prompts(100, objects=2)
    right = [grade(s, dataset.sample_scene(s, i).image).all_correct
             for i, s in enumerate(scenes)]
    assert sum(right) / len(right) >= 0.99


@pytest.mark.parametrize("relation", ["left of", "right of", "above", "below"])
def test_each_relation_is_read_and_its_opposite_fails(relation: str) -> None:
    pair = Pair(first=Thing(colour="yellow", shape="triangle", size="large"), relation=relation,
                second=Thing(colour="purple", shape="star", size="small"), background="black")
    image = dataset.sample_scene(pair, 5).image
    assert grade(pair, image).all_correct
    flipped = pair.model_copy(update={"relation": pair.converse().relation})
    verdict = grade(flipped, image)
    assert not verdict.relation and verdict.first.colour and verdict.second.shape


@pytest.mark.parametrize("objects", [1, 2])
def test_a_mirror_image_is_read_as_the_mirrored_scene(objects: int) -> None:
    # shapes-reader's mirror reading stands on this: every shape is symmetric about the vertical
    for seed in dataset.heldout_seeds(30):
        s = dataset.sample(seed, objects)
        mirror = ImageOps.mirror(s.image)
        assert (grade(s.attributes.mirrored(), mirror).clauses()
                == grade(s.attributes, s.image).clauses()), s.attributes.caption()
    places = {dataset.sample(seed, 1).attributes.mirrored().position
              for seed in dataset.heldout_seeds(30)}
    assert {"left", "right"} <= places


def test_swapped_objects_fail_the_relation_not_the_objects() -> None:
    pair = dataset.parse_caption("a small red star left of a large blue square, white background")
    swapped = pair.model_copy(update={"first": pair.second, "second": pair.first})
    verdict = grade(pair, dataset.render(swapped, (0, 0, 0, 0, 0)))
    assert not verdict.all_correct and not verdict.relation
    assert verdict.first.colour and verdict.second.shape


def test_a_missing_object_fails_count_and_its_clauses() -> None:
    pair = dataset.parse_caption("a small red star left of a large blue square, white background")
    single = dataset.parse_caption("a small red star on the left, white background")
    verdict = grade(pair, dataset.render(single))
    assert not verdict.count and not verdict.second.colour and not verdict.relation
    assert verdict.first.colour and verdict.background
    assert len(read(dataset.render(pair, (0, 0, 0, 0, 0))).objects) == 2


def test_checker_accepts_other_sizes() -> None:
    s = dataset.sample(3)
    assert check(s.image.resize((128, 128), Image.Resampling.NEAREST)) == s.attributes
    big = dataset.parse_caption("a large green square in the centre, gray background")
    assert check(dataset.render(big).resize((32, 32), Image.Resampling.BOX)) == big


def test_blank_image_has_no_attributes_and_matches_nothing() -> None:
    blank = Image.new("RGB", (64, 64), (0, 0, 0))
    assert check(blank) is None
    match = compare(dataset.sample(0).attributes, None)
    assert not match.all_correct and not match.colour


def test_checker_tells_a_wrong_prompt_apart() -> None:
    attrs = dataset.parse_caption("a large red circle in the centre, black background")
    image = dataset.render(attrs.model_copy(update={"shape": "star", "colour": "blue"}))
    match = grade(attrs, image)
    assert not match.shape and not match.colour
    assert match.size and match.position and match.background
    assert list(match.clauses()) == list(dataset.ATTRIBUTE_NAMES)


def _v1_render(colour: str, shape: str, size: str, position: str, background: str):
    """A clean image of the v1 world (32 px; radii 5 and 9, centre offsets 8 and 4.5), the
    world the shipped generator draws."""
    import numpy as np

    from genloop.shapes.scene import BACKGROUNDS, COLOURS

    dx, dy = {"centre": (0, 0), "left": (-1, 0), "right": (1, 0), "top": (0, -1),
              "bottom": (0, 1)}[position]
    offset, radius = {"small": (8.0, 5.0), "large": (4.5, 9.0)}[size]
    alpha = dataset.coverage(shape, 16 + dx * offset, 16 + dy * offset, radius, size=32)[..., None]
    pixels = (1 - alpha) * np.array(BACKGROUNDS[background]) + alpha * np.array(COLOURS[colour])
    return Image.fromarray(pixels.round().astype(np.uint8))


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("shape", ["circle", "square", "triangle", "star"])
def test_the_v1_world_is_read_with_its_own_sizes(shape: str, size: str) -> None:
    from genloop.shapes.scene import Attributes

    for position in ("centre", "left", "top"):
        wanted = Attributes(colour="red", shape=shape, size=size, position=position,
                            background="white")
        image = _v1_render(**wanted.model_dump())
        assert grade(wanted, image, world="v1").all_correct, position
        # read as v2, a small v1 shape is large
        assert compare(wanted, check(image)).size == (size == "large")
    with pytest.raises(ValueError, match="known: v2, v1"):
        read(image, world="v3")
