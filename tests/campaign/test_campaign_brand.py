"""Brand compliance measures the subject's colours: a labelled set of rendered shapes on black,
white and noisy backgrounds, each labelled on-brand when its fill lies within a few delta E of a
palette colour and off-brand when it lies far from all of them, and the verdict of the measure
(at least half the subject in brand colours) against those labels."""

from __future__ import annotations

import random

import pytest
from PIL import Image, ImageChops, ImageDraw

from genloop.campaign.brand import subject_compliance
from genloop.evaluators.palette import delta_e, palette_compliance, parse_colour, srgb_to_lab

PALETTE = [parse_colour(c) for c in ("#e62828", "#2850e6")]
SIZE = 256
#: A fill this close to a palette colour (delta E) is a shade of it; this far, another colour.
SHADE, OTHER = 12.0, 35.0
BACKGROUNDS = ("black", "white", "noisy")
PER_BACKGROUND = 100


def _distance(rgb) -> float:
    return min(delta_e(srgb_to_lab(rgb), srgb_to_lab(p)) for p in PALETTE)


def _fill(rng: random.Random, on_brand: bool, background) -> tuple[int, int, int]:
    while True:
        if on_brand:
            base = rng.choice(PALETTE)
            rgb = tuple(min(255, max(0, c + rng.randint(-14, 14))) for c in base)
        else:
            rgb = tuple(rng.randint(0, 255) for _ in range(3))
        d = _distance(rgb)
        visible = delta_e(srgb_to_lab(rgb), srgb_to_lab(background)) >= 25
        if visible and (d <= SHADE if on_brand else d >= OTHER):
            return rgb  # type: ignore[return-value]


def _noise(rng: random.Random, size: int, spread: int) -> Image.Image:
    """Uniform noise in 128 +- ``spread``, from ``rng`` (Pillow's effect_noise has its own
    unseeded generator, so the set would depend on what ran before)."""
    raw = Image.frombytes("L", (size, size), rng.randbytes(size * size))
    return raw.point(lambda v: 128 - spread + v * 2 * spread // 255)


def _background(rng: random.Random, kind: str) -> tuple[Image.Image, tuple[int, int, int]]:
    if kind != "noisy":
        colour = (0, 0, 0) if kind == "black" else (255, 255, 255)
        return Image.new("RGB", (SIZE, SIZE), colour), colour
    # Fine grain, or blotches (noise at 1/16 the size, enlarged): a texture, not a colour.
    colour = tuple(rng.randint(70, 190) for _ in range(3))
    grain = rng.choice([SIZE, SIZE // 16])
    noise = Image.merge("RGB", [_noise(rng, grain, 70) for _ in range(3)])
    noise = noise.resize((SIZE, SIZE), Image.Resampling.BICUBIC)
    return ImageChops.add(noise, Image.new("RGB", (SIZE, SIZE), colour), 1, -128), colour


def rendered(seed: int, kind: str, on_brand: bool) -> Image.Image:
    """A circle, square or triangle, shaded, on a ``kind`` background, with a little noise
    over it all, drawn at twice the size and reduced (anti-aliased edges)."""
    rng = random.Random(f"{seed}-{kind}-{on_brand}")
    image, colour = _background(rng, kind)
    fill = _fill(rng, on_brand, colour)
    big = image.resize((2 * SIZE, 2 * SIZE))
    # From a small mark to most of the picture, a quarter of them cut by an edge.
    r = rng.uniform(0.08, 0.4) * 2 * SIZE
    inset = r if rng.random() < 0.75 else r / 3
    cx, cy = (rng.uniform(inset, 2 * SIZE - inset) for _ in range(2))
    shape = rng.choice(["circle", "square", "triangle"])
    mask = Image.new("L", big.size)
    draw = ImageDraw.Draw(mask)
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
    elif shape == "square":
        draw.rectangle((cx - r * 0.8, cy - r * 0.8, cx + r * 0.8, cy + r * 0.8), fill=255)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)], fill=255)
    # Lit from above: the fill at the top, 12% darker at the bottom.
    shaded = Image.linear_gradient("L").resize(big.size).point(lambda v: 255 - v * 30 // 255)
    body = ImageChops.multiply(Image.new("RGB", big.size, fill),
                               Image.merge("RGB", [shaded] * 3))
    big.paste(body, (0, 0), mask)
    image = big.resize((SIZE, SIZE), Image.Resampling.LANCZOS)
    grain = Image.merge("RGB", [_noise(rng, SIZE, 7) for _ in range(3)])
    return ImageChops.add(image, grain, 1, -128)


def labelled_set(kind: str) -> list[tuple[Image.Image, bool]]:
    return [(rendered(i, kind, i % 2 == 0), i % 2 == 0) for i in range(PER_BACKGROUND)]


def agreement(measure, kind: str) -> float:
    verdicts = [(measure(image) >= 0.5) == label for image, label in labelled_set(kind)]
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
