"""Rendered shapes with known truth, for the campaign's image tests: a circle, square or
triangle, shaded, on a black, white or noisy background, with a little grain over it all; the
fill either a shade of a palette colour or far from all of them. Each comes with the shape's own
mask, so a test measures against what was drawn, not against the code it checks."""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image, ImageChops, ImageDraw

from genloop.evaluators.palette import delta_e, parse_colour, srgb_to_lab

PALETTE = [parse_colour(c) for c in ("#e62828", "#2850e6")]
SIZE = 256
#: A fill this close to a palette colour (delta E) is a shade of it; this far, another colour.
SHADE, OTHER = 12.0, 35.0
BACKGROUNDS = ("black", "white", "noisy")


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


def _noise(rng: random.Random, size: tuple[int, int], spread: int) -> Image.Image:
    """Uniform noise in 128 +- ``spread``, from ``rng`` (Pillow's effect_noise has its own
    unseeded generator, so the set would depend on what ran before)."""
    raw = Image.frombytes("L", size, rng.randbytes(size[0] * size[1]))
    return raw.point(lambda v: 128 - spread + v * 2 * spread // 255)


def _background(rng: random.Random, kind: str, size: tuple[int, int],
                texture: str | None) -> tuple[Image.Image, tuple[int, int, int]]:
    if kind != "noisy":
        colour = (0, 0, 0) if kind == "black" else (255, 255, 255)
        return Image.new("RGB", size, colour), colour
    # Fine grain, or blotches (noise at 1/16 the size, enlarged): a texture, not a colour.
    colour = tuple(rng.randint(70, 190) for _ in range(3))
    scale = rng.choice([1, 16])  # drawn even when told, so a seed keeps its other choices
    scale = {"grain": 1, "blotches": 16}.get(texture or "", scale)
    noise = Image.merge("RGB", [_noise(rng, (max(1, size[0] // scale), max(1, size[1] // scale)),
                                       70) for _ in range(3)])
    noise = noise.resize(size, Image.Resampling.BICUBIC)
    return ImageChops.add(noise, Image.new("RGB", size, colour), 1, -128), colour


@dataclass(frozen=True)
class Rendered:
    image: Image.Image
    mask: Image.Image  # "L": 255 where the shape was drawn
    background: str


def render(seed: int, kind: str, on_brand: bool, size: tuple[int, int] = (SIZE, SIZE),
           reach: tuple[float, float] = (0.08, 0.4), texture: str | None = None) -> Rendered:
    """A shape on a ``kind`` background, drawn at twice the size and reduced (anti-aliased
    edges); its radius is ``reach`` of the picture's shorter side. A noisy background is fine
    grain or coloured blotches, at random or as ``texture`` ("grain", "blotches") says."""
    rng = random.Random(f"{seed}-{kind}-{on_brand}")
    image, colour = _background(rng, kind, size, texture)
    fill = _fill(rng, on_brand, colour)
    w, h = 2 * size[0], 2 * size[1]
    big = image.resize((w, h))
    # From a small mark to most of the picture, a quarter of them cut by an edge.
    r = rng.uniform(*reach) * min(w, h)
    inset = r if rng.random() < 0.75 else r / 3
    cx, cy = rng.uniform(inset, w - inset), rng.uniform(inset, h - inset)
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
    image = big.resize(size, Image.Resampling.LANCZOS)
    grain = Image.merge("RGB", [_noise(rng, size, 7) for _ in range(3)])
    return Rendered(ImageChops.add(image, grain, 1, -128),
                    mask.resize(size, Image.Resampling.BOX).point(lambda v: 255 * (v > 0)), kind)


def rendered(seed: int, kind: str, on_brand: bool) -> Image.Image:
    return render(seed, kind, on_brand).image


