"""Formats never stretch; headlines always reach WCAG 4.5:1; the palette evaluator."""

from __future__ import annotations

import random

import pytest
from PIL import Image, ImageDraw

from genloop.campaign.creative import (
    MIN_CONTRAST,
    contrast_ratio,
    fit,
    relative_luminance,
    set_headline,
    subject_box,
)
from genloop.evaluators import default_registry
from genloop.evaluators.palette import palette_compliance


def disc(size=(64, 64), centre=(32, 32), r=10, fg=(230, 40, 40), bg=(0, 0, 0)):
    image = Image.new("RGB", size, bg)
    ImageDraw.Draw(image).ellipse((centre[0] - r, centre[1] - r, centre[0] + r, centre[1] + r),
                                  fill=fg)
    return image


@pytest.mark.parametrize("width,height", [(256, 256), (256, 320), (216, 384), (382, 200)])
@pytest.mark.parametrize("centre", [(32, 32), (14, 20), (50, 50)])
def test_formats_keep_the_subject_round_and_whole(width, height, centre):
    fitted = fit(disc(centre=centre), width, height)
    assert fitted.image.size == (width, height)
    box = subject_box(fitted.image)
    assert box is not None
    w, h = box[2] - box[0], box[3] - box[1]
    assert abs(w / h - 1.0) < 0.06, f"the disc became {w}x{h}: stretched"
    # The whole disc survives, with a margin: it touches no edge.
    assert box[0] > 0 and box[1] > 0 and box[2] < width and box[3] < height


def test_a_subject_too_wide_for_the_crop_is_padded_not_cut():
    wide = Image.new("RGB", (64, 64), "white")
    ImageDraw.Draw(wide).rectangle((4, 28, 60, 36), fill="blue")
    fitted = fit(wide, 216, 384)
    assert fitted.method == "pad"
    box = subject_box(fitted.image)
    assert box[2] - box[0] > 0.8 * 216  # the bar keeps its full length


def test_a_centred_subject_is_cropped():
    assert fit(disc(), 216, 384).method == "crop"


def _measured_contrast(before: Image.Image, placed) -> float:
    """The contrast between the text colour and the background behind the text block, measured
    on the image as it was before the headline (or on the panel, if one was drawn)."""
    source = placed.image if placed.panel else before
    region = source.crop(placed.box)
    # Text pixels are the text colour; measure only the others (the background).
    text_l = relative_luminance(placed.colour)
    data = region.tobytes()
    pixels = [tuple(data[i:i + 3]) for i in range(0, len(data), 3)]
    values = sorted(contrast_ratio(relative_luminance(p), text_l) for p in pixels
                    if p != placed.colour)
    return values[len(values) // 20]


@pytest.mark.parametrize("background", ["dark", "light", "noise", "split"])
def test_headlines_reach_4_5_to_1_on_any_picture(background):
    rng = random.Random(0)
    image = Image.new("RGB", (256, 320), (10, 10, 30) if background == "dark" else (245, 245, 235))
    if background == "noise":
        image.putdata([(rng.randrange(256),) * 3 for _ in range(256 * 320)])
    if background == "split":  # black and white stripes: no colour of text reads on both
        draw = ImageDraw.Draw(image)
        for x in range(0, 256, 8):
            draw.rectangle((x, 0, x + 3, 320), fill="black")
    placed = set_headline(image, "Made for long runs", cta="Shop now")
    assert placed.contrast >= MIN_CONTRAST
    assert _measured_contrast(image, placed) >= MIN_CONTRAST - 0.05
    assert placed.panel == (background in ("noise", "split"))
    assert placed.image.size == image.size


def test_palette_compliance_counts_the_brand_share_of_the_pixels():
    image = Image.new("RGB", (100, 100), (40, 80, 230))            # blue
    ImageDraw.Draw(image).rectangle((0, 0, 49, 99), fill=(230, 40, 40))  # left half red
    red, blue, green = (230, 40, 40), (40, 80, 230), (40, 180, 60)
    assert palette_compliance(image, [red]) == pytest.approx(0.5, abs=0.01)
    assert palette_compliance(image, [red, blue]) == pytest.approx(1.0, abs=0.01)
    assert palette_compliance(image, [green]) == 0.0
    # A shade within delta E 20 of the brand red still counts; orange does not.
    assert palette_compliance(image, [(215, 45, 45)]) == pytest.approx(0.5, abs=0.01)
    assert palette_compliance(image, [(240, 140, 30)]) == 0.0


def test_the_brand_palette_evaluator_is_registered_and_scores_0_to_100():
    judge = default_registry.get("brand-palette", "cpu", palette=["#e62828"])
    half = Image.new("RGB", (10, 10), "white")
    ImageDraw.Draw(half).rectangle((0, 0, 4, 9), fill=(230, 40, 40))
    scores = judge.score([half, Image.new("RGB", (10, 10), "white")], "ignored")
    assert scores.values[0] == pytest.approx(50.0, abs=1.0) and scores.values[1] == 0.0
    assert judge.identity == "brand-palette(e62828;de20)"
