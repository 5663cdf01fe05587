"""Brand-palette compliance: how much of an image is in the brand's colours.

An image's dominant colours are found by median-cut quantisation (Pillow), each is converted to
CIELAB, where Euclidean distance (delta E 1976) tracks perceived difference far better than in RGB,
and compliance is the share of pixels whose dominant colour lies within ``max_distance`` of some
palette colour. A delta E of about 2 is just noticeable; the default 20 accepts shades of a brand
colour while telling red from orange.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PIL import Image, ImageColor

from genloop.sdk.errors import Permanent

from .base import Evaluator, Scores

RGB = tuple[int, int, int]
Lab = tuple[float, float, float]


def parse_colour(colour: str) -> RGB:
    """``'#e4002b'``, ``'#fff'``, ``'rgb(10, 20, 30)'`` or a CSS name; ``ValueError`` otherwise."""
    rgb = ImageColor.getrgb(colour)
    return (rgb[0], rgb[1], rgb[2])


def srgb_to_lab(rgb: RGB) -> Lab:
    """sRGB (0..255) to CIELAB under D65."""

    def linear(c: float) -> float:
        c /= 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = f(x), f(y), f(z)
    return (116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz))


def delta_e(a: Lab, b: Lab) -> float:
    return math.dist(a, b)


def dominant_colours(image: Image.Image, k: int = 8) -> list[tuple[RGB, float]]:
    """Up to ``k`` dominant colours of ``image`` with the share of pixels each stands for."""
    rgb = image.convert("RGB")
    quantised = rgb.quantize(colors=k, method=Image.Quantize.MEDIANCUT)
    palette = quantised.getpalette() or []
    total = rgb.width * rgb.height
    colours = []
    for count, index in sorted(quantised.getcolors(k) or [], reverse=True):
        # A "P" image's colours are palette indices; Pillow types a band's colour as float.
        r, g, b = palette[3 * index: 3 * index + 3]  # type: ignore[operator]
        colours.append(((r, g, b), count / total))
    return colours


def palette_compliance(image: Image.Image, palette: Sequence[RGB],
                       max_distance: float = 20.0) -> float:
    """Share (0..1) of the image's pixels whose dominant colour matches a palette colour."""
    targets = [srgb_to_lab(c) for c in palette]
    return sum(
        share for colour, share in dominant_colours(image)
        if min(delta_e(srgb_to_lab(colour), t) for t in targets) <= max_distance
    )


class BrandPaletteEvaluator(Evaluator):
    """Scores ``100 * palette_compliance``; the prompt is not used."""

    needs_text = False

    def __init__(self, palette: Sequence[str], max_distance: float = 20.0,
                 device: str = "cpu") -> None:
        if not palette:
            raise Permanent("brand-palette needs palette=['#rrggbb', ...]")
        try:
            self.palette = [parse_colour(c) for c in palette]
        except ValueError as exc:
            raise Permanent(f"brand-palette: {exc}") from exc
        if not (max_distance > 0 and math.isfinite(max_distance)):
            raise Permanent(f"brand-palette: max_distance must be > 0, got {max_distance}")
        self.max_distance = float(max_distance)
        self.device = device
        colours = ",".join(f"{r:02x}{g:02x}{b:02x}" for r, g, b in self.palette)
        self.identity = f"brand-palette({colours};de{self.max_distance:g})"

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        values = [100.0 * palette_compliance(im, self.palette, self.max_distance) for im in images]
        return Scores(values=values, evaluator=self.identity)
