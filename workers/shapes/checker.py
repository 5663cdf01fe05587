"""Ground-truth attribute checker: reads a shapes-world image with plain pixel geometry.

No learned parts, so it can grade a generator (or a CLIP score) without sharing its mistakes:
background from the border, foreground by distance from it, colour by the nearest palette entry,
position by centroid, shape by the best IoU against area-matched templates, size by the radius
that template implies. Any image size is accepted; it is resized to 32x32 first.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict

from .dataset import (
    BACKGROUNDS,
    COLOURS,
    IMAGE_SIZE,
    RADIUS,
    SHAPES,
    Attributes,
    coverage,
    to_array,
)

# A pixel this far (RGB distance) from the background belongs to the foreground, for finding
# the foreground colour; the shape mask itself uses coverage along the fg-bg axis.
_FOREGROUND_DISTANCE = 60.0
_MIN_FOREGROUND_PIXELS = 4
# Sizes are nominal radii 5 and 9; split at their geometric mean.
_SIZE_SPLIT = math.sqrt(RADIUS["small"] * RADIUS["large"])
# Nominal offsets are 4.5 (large) and 8 (small) pixels, jittered by at most 0.75 per axis.
_CENTRE_RADIUS = 2.4


class Match(BaseModel):
    """Which attributes of a prompt the checker found in an image."""

    model_config = ConfigDict(frozen=True)

    colour: bool
    shape: bool
    size: bool
    position: bool
    background: bool

    @property
    def all_correct(self) -> bool:
        return self.colour and self.shape and self.size and self.position and self.background


@functools.cache
def _area_per_r2(shape: str) -> float:
    r = 10.0
    return float(coverage(shape, IMAGE_SIZE / 2, IMAGE_SIZE / 2, r).sum()) / (r * r)


def _nearest(value: np.ndarray, palette: dict[str, tuple[int, int, int]]) -> str:
    names = list(palette)
    table = np.asarray([palette[n] for n in names], dtype=np.float32)
    return names[int(np.argmin(((table - value) ** 2).sum(axis=1)))]


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


def check(image: Image.Image) -> Attributes | None:
    """The attributes visible in ``image``, or ``None`` when no shape stands out."""
    if image.size != (IMAGE_SIZE, IMAGE_SIZE):
        image = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BOX)
    px = to_array(image)
    border = np.concatenate([px[0], px[-1], px[1:-1, 0], px[1:-1, -1]])
    bg = np.median(border, axis=0)
    distance = np.sqrt(((px - bg) ** 2).sum(axis=-1))
    core = distance > _FOREGROUND_DISTANCE
    if core.sum() < _MIN_FOREGROUND_PIXELS:
        return None
    # Take the far half of the foreground so anti-aliased edges don't pull the colour to bg.
    far = distance >= np.median(distance[core])
    fg = np.median(px[far & core], axis=0)
    # Coverage of each pixel by the shape, from its position on the line from bg to fg.
    axis = fg - bg
    alpha = np.clip(((px - bg) @ axis) / float(axis @ axis), 0.0, 1.0)
    mask = alpha > 0.5
    area = float(alpha.sum())
    ys, xs = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float32) + 0.5
    cx, cy = float((alpha * xs).sum() / area), float((alpha * ys).sum() / area)

    best_shape, best_iou = SHAPES[0], -1.0
    for shape in SHAPES:
        r = math.sqrt(area / _area_per_r2(shape))
        iou = _iou(mask, coverage(shape, cx, cy, r) > 0.5)
        if iou > best_iou:
            best_shape, best_iou = shape, iou
    radius = math.sqrt(area / _area_per_r2(best_shape))

    dx, dy = cx - IMAGE_SIZE / 2, cy - IMAGE_SIZE / 2
    if max(abs(dx), abs(dy)) < _CENTRE_RADIUS:
        position = "centre"
    elif abs(dx) >= abs(dy):
        position = "left" if dx < 0 else "right"
    else:
        position = "top" if dy < 0 else "bottom"
    return Attributes(
        colour=_nearest(fg, COLOURS),
        shape=best_shape,
        size="large" if radius > _SIZE_SPLIT else "small",
        position=position,
        background=_nearest(bg, BACKGROUNDS),
    )


def compare(expected: Attributes, found: Attributes | None) -> Match:
    """Per-attribute agreement; an image with no visible shape matches nothing."""
    if found is None:
        return Match(colour=False, shape=False, size=False, position=False, background=False)
    return Match(
        colour=found.colour == expected.colour,
        shape=found.shape == expected.shape,
        size=found.size == expected.size,
        position=found.position == expected.position,
        background=found.background == expected.background,
    )
