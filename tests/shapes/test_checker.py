"""The checker reads every attribute of clean renders (>= 99% each) with pixel geometry alone."""

from __future__ import annotations

from PIL import Image

from genloop.workers.shapes import check, compare, dataset


def test_checker_reads_clean_renders() -> None:
    # Given 600 held-out clean renders
    samples = [dataset.sample(s) for s in dataset.heldout_seeds(600)]
    # When the checker reads each one
    matches = [compare(s.attributes, check(s.image)) for s in samples]
    # Then every attribute is right at least 99% of the time
    for name in dataset.ATTRIBUTE_NAMES:
        rate = sum(getattr(m, name) for m in matches) / len(matches)
        assert rate >= 0.99, (name, rate)


def test_checker_accepts_larger_images() -> None:
    s = dataset.sample(3)
    big = s.image.resize((128, 128), Image.Resampling.NEAREST)
    assert check(big) == s.attributes


def test_blank_image_has_no_attributes_and_matches_nothing() -> None:
    blank = Image.new("RGB", (32, 32), (0, 0, 0))
    assert check(blank) is None
    match = compare(dataset.sample(0).attributes, None)
    assert not match.all_correct and not match.colour


def test_checker_tells_a_wrong_prompt_apart() -> None:
    attrs = dataset.parse_caption("a large red circle in the centre, black background")
    image = dataset.render(attrs.model_copy(update={"shape": "star", "colour": "blue"}))
    match = compare(attrs, check(image))
    assert not match.shape and not match.colour
    assert match.size and match.position and match.background
