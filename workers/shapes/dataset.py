"""Procedural shapes world: one flat shape on a plain background, 32x32 RGB, captioned.

Every sample is a pure function of its seed, so the data set is generated on the fly and a
held-out split is just another range of seeds. The caption grammar is fixed and parseable both
ways ("a large red circle in the centre, black background" <-> :class:`Attributes`), which is
what lets the checker grade generated images against the prompt that made them.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw
from pydantic import BaseModel, ConfigDict

IMAGE_SIZE = 32
# Shapes are drawn at 4x and box-filtered down: edges are anti-aliased like a real photo's,
# and a sub-pixel position jitter becomes visible to the models.
SUPERSAMPLE = 4

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 230),
    "yellow": (240, 220, 40),
    "purple": (150, 60, 200),
    "cyan": (40, 200, 220),
}
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "gray": (128, 128, 128),
}
SHAPES = ("circle", "square", "triangle", "star")
SIZES = ("small", "large")
POSITIONS = ("centre", "left", "right", "top", "bottom")
ATTRIBUTE_NAMES = ("colour", "shape", "size", "position", "background")

#: Nominal radius (pixels) of each size and the centre offset of each position for that size.
RADIUS = {"small": 5.0, "large": 9.0}
OFFSET = {"small": 8.0, "large": 4.5}
JITTER = 0.75
_DIRECTION = {"centre": (0, 0), "left": (-1, 0), "right": (1, 0), "top": (0, -1), "bottom": (0, 1)}
_POSITION_PHRASE = {
    "centre": "in the centre",
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
}

#: Seeds below this are training data; held-out samples use seeds from here on.
HELDOUT_SEED_START = 1_000_000_000

Colour = Literal["red", "green", "blue", "yellow", "purple", "cyan"]
Shape = Literal["circle", "square", "triangle", "star"]
Size = Literal["small", "large"]
Position = Literal["centre", "left", "right", "top", "bottom"]
Background = Literal["black", "white", "gray"]


class Attributes(BaseModel):
    """What a caption says and what the checker reads back from an image."""

    model_config = ConfigDict(frozen=True)

    colour: Colour
    shape: Shape
    size: Size
    position: Position
    background: Background

    def caption(self) -> str:
        return (
            f"a {self.size} {self.colour} {self.shape} {_POSITION_PHRASE[self.position]}, "
            f"{self.background} background"
        )


_CAPTION_RE = re.compile(
    r"^a (?P<size>\w+) (?P<colour>\w+) (?P<shape>\w+) (?P<position>(?:in|on|at) the \w+), "
    r"(?P<background>\w+) background$"
)


def parse_caption(caption: str) -> Attributes:
    """Inverse of :meth:`Attributes.caption`; raises ``ValueError`` on any other text."""
    match = _CAPTION_RE.match(caption.strip().lower())
    if match is None:
        raise ValueError(
            f"not a shapes caption: {caption!r}; expected e.g. "
            "'a large red circle in the centre, black background'"
        )
    fields = match.groupdict()
    phrase_to_position = {v: k for k, v in _POSITION_PHRASE.items()}
    if fields["position"] not in phrase_to_position:
        raise ValueError(f"unknown position phrase {fields['position']!r} in {caption!r}")
    fields["position"] = phrase_to_position[fields["position"]]
    return Attributes.model_validate(fields)


def _shape_polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    """Vertices of a polygonal shape whose centroid is (cx, cy); y grows downwards."""
    if shape == "square":
        h = 0.9 * r
        return [(cx - h, cy - h), (cx + h, cy - h), (cx + h, cy + h), (cx - h, cy + h)]
    if shape == "triangle":
        big = 1.15 * r  # circumradius; an equilateral triangle's centroid is its circumcentre
        angles = [-90.0, 30.0, 150.0]
        return [(cx + big * math.cos(math.radians(a)), cy + big * math.sin(math.radians(a)))
                for a in angles]
    if shape == "star":
        outer, inner = 1.2 * r, 0.5 * r
        points = []
        for k in range(10):
            rad = outer if k % 2 == 0 else inner
            a = math.radians(-90.0 + 36.0 * k)
            points.append((cx + rad * math.cos(a), cy + rad * math.sin(a)))
        return points
    raise ValueError(f"not a polygon shape: {shape!r}")


def coverage(shape: str, cx: float, cy: float, r: float, size: int = IMAGE_SIZE) -> np.ndarray:
    """Fraction of each pixel covered by the shape, float32 ``(size, size)`` in [0, 1].

    Coordinates are in pixels of the final image; pixel (i, j) spans [j, j+1) x [i, i+1).
    """
    s = SUPERSAMPLE
    canvas = Image.new("L", (size * s, size * s), 0)
    draw = ImageDraw.Draw(canvas)
    if shape == "circle":
        draw.ellipse([(cx - r) * s, (cy - r) * s, (cx + r) * s - 1, (cy + r) * s - 1], fill=255)
    else:
        draw.polygon([(x * s, y * s) for x, y in _shape_polygon(shape, cx, cy, r)], fill=255)
    small = canvas.resize((size, size), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.float32) / 255.0


def render(attrs: Attributes, dx: float = 0.0, dy: float = 0.0) -> Image.Image:
    """Draw ``attrs`` with the shape centre moved by (dx, dy) pixels from its nominal place."""
    r = RADIUS[attrs.size]
    ux, uy = _DIRECTION[attrs.position]
    cx = IMAGE_SIZE / 2 + ux * OFFSET[attrs.size] + dx
    cy = IMAGE_SIZE / 2 + uy * OFFSET[attrs.size] + dy
    alpha = coverage(attrs.shape, cx, cy, r)[..., None]
    fg = np.asarray(COLOURS[attrs.colour], dtype=np.float32)
    bg = np.asarray(BACKGROUNDS[attrs.background], dtype=np.float32)
    pixels = alpha * fg + (1.0 - alpha) * bg
    return Image.fromarray(np.round(pixels).astype(np.uint8), mode="RGB")


class Sample(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    seed: int
    attributes: Attributes
    caption: str
    image: Image.Image


def sample_attributes(rng: random.Random) -> Attributes:
    return Attributes(
        colour=rng.choice(list(COLOURS)),
        shape=rng.choice(SHAPES),
        size=rng.choice(SIZES),
        position=rng.choice(POSITIONS),
        background=rng.choice(list(BACKGROUNDS)),
    )


def sample(seed: int) -> Sample:
    """The sample for ``seed``: same seed, same pixels, on any machine."""
    rng = random.Random(seed)
    attrs = sample_attributes(rng)
    dx, dy = rng.uniform(-JITTER, JITTER), rng.uniform(-JITTER, JITTER)
    return Sample(seed=seed, attributes=attrs, caption=attrs.caption(), image=render(attrs, dx, dy))


def train_seeds(start: int = 0) -> Iterator[int]:
    """Endless training seeds (all below :data:`HELDOUT_SEED_START`)."""
    seed = start
    while seed < HELDOUT_SEED_START:
        yield seed
        seed += 1


def heldout_seeds(n: int, start: int = 0) -> list[int]:
    """``n`` held-out seeds; disjoint from every training seed."""
    return [HELDOUT_SEED_START + start + i for i in range(n)]


def heldout_prompts(n: int, start: int = 0) -> list[Attributes]:
    """Attributes of ``n`` held-out samples, for prompting a generator."""
    return [sample(s).attributes for s in heldout_seeds(n, start)]


def to_array(image: Image.Image) -> np.ndarray:
    """``(H, W, 3)`` float32 in [0, 255] from any PIL image."""
    return np.asarray(image.convert("RGB"), dtype=np.float32)


def one_attribute_variants(attrs: Attributes, attribute: str) -> list[Attributes]:
    """Every attributes value that differs from ``attrs`` in exactly ``attribute``."""
    choices = {
        "colour": list(COLOURS), "shape": list(SHAPES), "size": list(SIZES),
        "position": list(POSITIONS), "background": list(BACKGROUNDS),
    }[attribute]
    current = getattr(attrs, attribute)
    return [attrs.model_copy(update={attribute: v}) for v in choices if v != current]
