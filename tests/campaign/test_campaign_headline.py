"""Headlines never cover the subject, and padding continues the background: measured on rendered
shapes whose true masks are known (``rendered_shapes``), in the formats a campaign makes."""

from __future__ import annotations

import pytest
from PIL import Image, ImageChops, ImageDraw, ImageStat
from rendered_shapes import render

from genloop.campaign.creative import fit, set_headline

FORMATS = {"1:1": (256, 256), "4:5": (256, 320), "9:16": (216, 384), "1.91:1": (382, 200)}
HEADLINE, CTA = "Round, bold, red.", "Shop now"


def covered(mask: Image.Image, box) -> int:
    """Subject pixels under ``box``."""
    return sum(ImageStat.Stat(mask.crop(box)).sum) // 255


def overlaps(kind: str, seeds: int, texture: str | None = None) -> list[tuple]:
    """(format, seed, subject pixels truly under the headline, overlap the placement
    reported) for each rendered picture."""
    found = []
    for name, size in FORMATS.items():
        for seed in range(seeds):
            shape = render(seed, kind, seed % 2 == 0, size=size, reach=(0.15, 0.3),
                           texture=texture)
            placed = set_headline(shape.image, HEADLINE, CTA)
            found.append((name, seed, covered(shape.mask, placed.box), placed.overlap))
    return found


@pytest.mark.parametrize("kind", ["black", "white"])
def test_the_headline_never_covers_the_subject(kind):
    found = overlaps(kind, 8)
    assert [o for o in found if o[2]] == []
    assert all(measured == 0 for *_, measured in found)  # and says so


def test_on_grain_the_headline_misses_all_but_the_faintest_subjects():
    # A subject within ~25 delta E of a grainy backdrop can merge into it for the measure
    # (1-2 of 80 here); the placement without the subject mask covered 15 of 32 noisy ones.
    found = overlaps("noisy", 20, texture="grain")
    assert sum(1 for o in found if o[2]) <= len(found) // 20


def test_with_no_free_place_the_overlap_is_smallest_and_reported():
    # A subject filling the banner but for a thin white frame: no band, half or smaller type
    # clears it.
    image = Image.new("RGB", (382, 200), "white")
    ImageDraw.Draw(image).rectangle((30, 25, 352, 175), fill=(230, 40, 40))
    placed = set_headline(image, HEADLINE, CTA)
    assert placed.overlap > 0 and placed.panel


def _rows(image: Image.Image, top: int, bottom: int) -> ImageStat.Stat:
    return ImageStat.Stat(image.convert("L").crop((0, top, image.width, bottom)))


def test_padding_continues_a_noisy_background_without_a_seam():
    shape = render(3, "noisy", True, reach=(0.3, 0.3))
    fitted = fit(shape.image, 216, 384)
    assert fitted.method == "pad"
    out = fitted.image
    seam = round(-fitted.window[1] * out.height / (fitted.window[3] - fitted.window[1]))
    assert 20 < seam < out.height // 2
    padding, inside = _rows(out, 0, seam - 2), _rows(out, seam + 2, seam + 40)
    # The padding is as textured as the picture beside it, not flat.
    assert padding.stddev[0] >= 0.6 * inside.stddev[0]
    assert abs(padding.mean[0] - inside.mean[0]) < 0.25 * inside.stddev[0]
    # Crossing the seam changes no more than crossing two rows inside the picture.

    def step(a: int, b: int) -> float:
        row = (0, a, out.width, a + 1)
        diff = ImageChops.difference(out.crop(row).convert("L"),
                                     out.crop((0, b, out.width, b + 1)).convert("L"))
        return ImageStat.Stat(diff).mean[0]

    assert step(seam - 1, seam) <= 1.5 * step(seam + 10, seam + 11)


def _drawn(image: Image.Image, placed) -> tuple[int, int]:
    """Pixels the headline changed inside its box, and outside it (where nothing may change)."""
    diff = ImageChops.difference(image.convert("RGB"), placed.image).convert("L")
    inside = Image.new("L", image.size)
    ImageDraw.Draw(inside).rectangle((placed.box[0], placed.box[1], placed.box[2] - 1,
                                      placed.box[3] - 1), fill=255)
    changed = diff.point(lambda v: 255 if v else 0)
    within = ImageChops.multiply(changed, inside)
    return covered(within, (0, 0) + image.size), covered(
        ImageChops.subtract(changed, within), (0, 0) + image.size)


def _subject(size: tuple[int, int], shape: str, box: tuple[int, int, int, int],
             colour: tuple[int, int, int]) -> tuple[Image.Image, Image.Image]:
    """A white picture with one ``shape`` ("ellipse", "rectangle") in ``box``, and its mask."""
    image = Image.new("RGB", size, "white")
    mask = Image.new("L", size)
    for target, fill in ((image, colour), (mask, 255)):
        getattr(ImageDraw.Draw(target), shape)(box, fill=fill)
    return image, mask


def test_a_banner_whose_subject_fills_its_height_has_the_headline_beside_it():
    # The finding (adops-24, a large red circle on white cropped to 1.91:1): no band is free
    # and both halves cut the circle, so the headline went on a panel over 3% of it (6-13%
    # before the placement measured the subject). There is room on either side of it.
    image, mask = _subject((382, 200), "ellipse", (115, 22, 265, 172), (230, 40, 40))
    placed = set_headline(image, "Round, bold, and yours.", CTA)
    assert covered(mask, placed.box) == 0 and placed.overlap == 0
    assert not placed.panel  # white space beside it: black text reads without one
    inside, outside = _drawn(image, placed)
    assert inside > 0 and outside == 0


@pytest.mark.parametrize("kind", ["black", "white"])
def test_subjects_that_fill_a_banner_are_never_covered(kind):
    found = []
    for seed in range(16):
        shape = render(seed, kind, seed % 2 == 0, size=FORMATS["1.91:1"], reach=(0.3, 0.42))
        placed = set_headline(shape.image, HEADLINE, CTA)
        found.append((seed, covered(shape.mask, placed.box), placed.overlap))
    assert [f for f in found if f[1] or f[2]] == []


def test_specks_in_every_band_and_half_leave_room_between_them():
    # The finding (make campaign-demo, a blue square at the top on black): specks of the
    # model's background noise stand apart from black, so every band and half held a few
    # "subject" pixels and the headline went on a panel in a corner, over one of them.
    image = Image.new("RGB", (256, 256), "black")
    draw = ImageDraw.Draw(image)
    draw.rectangle((85, 45, 170, 135), fill=(40, 80, 230))
    for x, y in ((40, 228), (200, 235), (250, 190)):
        draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=(110, 30, 30))
    placed = set_headline(image, "The square deal.", CTA)
    assert placed.overlap == 0 and not placed.panel
    assert _drawn(image, placed)[1] == 0


def test_a_word_wider_than_a_half_is_never_drawn_past_its_box():
    # A portrait whose bands all cross a tall subject leaves its halves, narrower than the
    # headline's one long word at the first size: the word went out of its box, over the
    # subject.
    image, mask = _subject((216, 384), "rectangle", (112, 0, 128, 383), (40, 80, 230))
    placed = set_headline(image, "Extraordinarily", CTA)
    assert covered(mask, placed.box) == 0 and placed.overlap == 0
    inside, outside = _drawn(image, placed)
    assert inside > 0 and outside == 0
