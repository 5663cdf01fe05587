"""Drawings on the checker's boundaries, for ``shapes-reader`` to learn where they lie.

The generator's images are mostly far from a boundary, so a reader trained on them and on clean
renders learns little of where the checker stops calling a rounded square a square, or two
touching shapes one object. These are clean drawings made to sit near such lines: each outline
lies part way between two shape kinds (the radius at every angle interpolated between theirs),
turned a little, of any radius from a speck to a large shape; and one to three objects placed
anywhere, two of them often close enough to touch or overlap. Nothing here says what a drawing
is: the checker reads it (:func:`.train_reader.label`), so its boundaries are what the reader
learns, whatever the geometry was meant to be. Objects are drawn only in the colours that
:data:`~genloop.shapes.dataset.HELDOUT_COMBOS` holds out with no shape.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence

import numpy as np
from PIL import Image

from genloop.shapes.dataset import (
    HELDOUT_COMBOS,
    HELDOUT_SEED_START,
    IMAGE_SIZE,
    polygon_coverage,
    shape_polygon,
)
from genloop.shapes.scene import BACKGROUNDS, COLOURS, SHAPES

# Angles the outline is sampled at: a 3-degree step holds every vertex of the four shapes
# (multiples of 45 and 36 degrees, and -90, 30, 150), so t = 0 or 1 draws the shape itself.
_ANGLES = np.radians(np.arange(0.0, 360.0, 3.0))
# Radii (pixels): specks around the checker's 12-pixel minimum, then small to beyond large.
_SPECK, _RADIUS = (1.5, 3.5), (4.0, 13.0)
_SPECK_SHARE = 0.15
_MAX_TURN = 15.0
# Colours held out with no shape: of a held-out colour, the drawings whose outline the checker
# reads as the shape held out with it would be dropped, and only those, so the reader would
# learn that such outlines in that colour are other shapes (its geometry branch sees how far
# an edge stands out, which the colour sets).
_FREE_COLOURS = [c for c in COLOURS if all(c != h for h, _ in HELDOUT_COMBOS)]
#: Objects per drawing and their odds.
_COUNTS, _COUNT_ODDS = (1, 2, 3), (0.35, 0.5, 0.15)


@functools.cache
def _unit_radius(shape: str) -> np.ndarray:
    """Distance from centre to outline along each of :data:`_ANGLES`, for radius 1."""
    if shape == "circle":
        return np.ones_like(_ANGLES)
    vertices = np.asarray(shape_polygon(shape, 0.0, 0.0, 1.0))
    p, e = vertices, np.roll(vertices, -1, axis=0) - vertices
    d = np.stack([np.cos(_ANGLES), np.sin(_ANGLES)], 1)[:, None]  # (angles, 1, 2)
    cross = d[..., 0] * e[:, 1] - d[..., 1] * e[:, 0]  # d x e, (angles, edges)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (p[:, 0] * e[:, 1] - p[:, 1] * e[:, 0]) / cross  # along the ray
        u = (p[:, 0] * d[..., 1] - p[:, 1] * d[..., 0]) / cross  # along the edge
    hit = (s > 0) & (u >= -1e-9) & (u <= 1 + 1e-9)
    return np.where(hit, s, np.inf).min(1)


def outline(shapes: tuple[str, str], t: float, cx: float, cy: float, r: float,
            turn: float = 0.0) -> list[tuple[float, float]]:
    """Vertices of the outline ``t`` of the way from ``shapes[0]`` to ``shapes[1]``, centred
    on (cx, cy), turned ``turn`` degrees."""
    rho = r * ((1 - t) * _unit_radius(shapes[0]) + t * _unit_radius(shapes[1]))
    angle = _ANGLES + math.radians(turn)
    return list(zip((cx + rho * np.cos(angle)).tolist(), (cy + rho * np.sin(angle)).tolist(),
                    strict=True))


def _centres(rng: random.Random, radii: list[float]) -> list[tuple[float, float]]:
    """The first object anywhere; the second beside it, from a little overlap to well apart,
    in any direction; a third anywhere."""
    def inside(v: float, r: float) -> float:
        return min(max(v, r + 1.0), IMAGE_SIZE - r - 1.0)

    out = [(inside(rng.uniform(14, 50), radii[0]), inside(rng.uniform(14, 50), radii[0]))]
    if len(radii) > 1:
        gap = (radii[0] + radii[1]) * rng.uniform(0.75, 1.05) + rng.uniform(0.0, 6.0)
        angle = rng.uniform(0.0, 2 * math.pi)
        mid = IMAGE_SIZE / 2 + rng.uniform(-5, 5), IMAGE_SIZE / 2 + rng.uniform(-5, 5)
        out = [(inside(mid[0] + sign * gap / 2 * math.cos(angle), r),
                inside(mid[1] + sign * gap / 2 * math.sin(angle), r))
               for sign, r in ((-1, radii[0]), (1, radii[1]))]
    for r in radii[2:]:
        out.append((inside(rng.uniform(0, IMAGE_SIZE), r), inside(rng.uniform(0, IMAGE_SIZE), r)))
    return out


def blend(rng: random.Random) -> tuple[tuple[str, str], str]:
    """Two shape kinds to draw between and a colour held out with no shape."""
    first, second = rng.sample(SHAPES, 2)
    return (first, second), rng.choice(_FREE_COLOURS)


def boundary_drawing(seed: int) -> Image.Image:
    """The drawing of ``seed`` (a training seed): same seed, same pixels."""
    if not 0 <= seed < HELDOUT_SEED_START:
        raise ValueError(f"seed {seed} is not a training seed (0 to {HELDOUT_SEED_START - 1})")
    rng = random.Random(seed)
    background = rng.choice(list(BACKGROUNDS))
    pixels = np.broadcast_to(np.asarray(BACKGROUNDS[background], dtype=np.float32),
                             (IMAGE_SIZE, IMAGE_SIZE, 3)).copy()
    count = rng.choices(_COUNTS, _COUNT_ODDS)[0]
    radii = [rng.uniform(*(_SPECK if rng.random() < _SPECK_SHARE else _RADIUS))
             for _ in range(count)]
    for r, (cx, cy) in zip(radii, _centres(rng, radii), strict=True):
        pair, colour = blend(rng)
        alpha = polygon_coverage(outline(pair, rng.random(), cx, cy, r,
                                         rng.uniform(-_MAX_TURN, _MAX_TURN)))[..., None]
        pixels = alpha * np.asarray(COLOURS[colour], dtype=np.float32) + (1 - alpha) * pixels
    return Image.fromarray(np.round(pixels).astype(np.uint8))


def boundary_pool(seeds: Sequence[int]) -> np.ndarray:
    """uint8 ``(N, 64, 64, 3)``: :func:`boundary_drawing` of each seed."""
    return np.stack([np.asarray(boundary_drawing(s), dtype=np.uint8) for s in seeds])
