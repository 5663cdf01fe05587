"""Brand compliance measures the subject's colours: a labelled set of rendered shapes on black,
white and noisy backgrounds, each labelled on-brand when its fill lies within a few delta E of a
palette colour and off-brand when it lies far from all of them, and the verdict of the measure
(at least half the subject in brand colours) against those labels."""

from __future__ import annotations

import pytest
from PIL import Image, ImageDraw
from rendered_shapes import BACKGROUNDS, PALETTE, SIZE, rendered

from genloop.campaign.brand import subject_compliance
from genloop.evaluators.palette import palette_compliance

PER_BACKGROUND = 100

def labelled_set(kind: str, seeds: range = range(PER_BACKGROUND)
                 ) -> list[tuple[Image.Image, bool]]:
    return [(rendered(i, kind, i % 2 == 0), i % 2 == 0) for i in seeds]


def agreement(measure, kind: str, seeds: range = range(PER_BACKGROUND)) -> float:
    verdicts = [(measure(image) >= 0.5) == label for image, label in labelled_set(kind, seeds)]
    return sum(verdicts) / len(verdicts)


def test_a_red_circle_on_black_is_on_brand():
    # The finding: the whole picture's 8 dominant colours merged the circle into a dark red
    # 31 delta E from the palette's, so it scored 0%.
    image = Image.new("RGB", (SIZE, SIZE), "black")
    ImageDraw.Draw(image).ellipse((80, 80, 176, 176), fill=(230, 40, 40))
    assert subject_compliance(image, PALETTE).share >= 0.9
    image = Image.new("RGB", (SIZE, SIZE), "white")
    ImageDraw.Draw(image).rectangle((60, 60, 196, 196), fill=(40, 80, 230))
    assert subject_compliance(image, PALETTE).share >= 0.9


@pytest.mark.parametrize("kind", BACKGROUNDS)
def test_verdicts_agree_with_the_labelled_set(kind):
    assert agreement(lambda im: subject_compliance(im, PALETTE).share, kind) >= 0.95


def test_the_whole_picture_measure_disagrees_where_the_background_dominates():
    # Why the subject is measured: the background's pixels outvote any product.
    assert agreement(lambda im: palette_compliance(im, PALETTE), "white") < 0.75


@pytest.mark.slow
def test_verdicts_agree_on_fresh_noisy_pictures():
    # 300 noisy pictures beyond the set above, where at 96 px and 10 delta E the verdicts
    # agreed 0.927 (on-brand subjects beside blotches of nearly their colour ran into the
    # backdrop); at 128 px and 8 delta E, 0.96. (The finer setting was then checked on 900
    # pictures of seeds neither was chosen on: 0.977 against 0.954.)
    assert agreement(lambda im: subject_compliance(im, PALETTE).share, "noisy",
                     range(5000, 5300)) >= 0.95
