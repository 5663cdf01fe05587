"""Ground-truth checker: reads a shapes-world image with plain pixel geometry, grades it per clause.

No learned parts, so it can grade a generator (or a CLIP score) without sharing its mistakes.
Background from the border; objects are the connected regions that stand out from it (each
with its own colour, so two objects of different colours that touch still count as two only if
some background separates them); per object: colour by the nearest palette entry, shape by the
best IoU against area-matched templates, size by the radius that template implies, place by
centroid. Any image size is accepted; it is resized to 64x64 first.

:func:`grade` is the entry point for prompts of either kind; :func:`check` and :func:`compare`
are the one-object forms kept from v1.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict

from .dataset import IMAGE_SIZE, RADIUS, coverage, to_array
from .scene import BACKGROUNDS, COLOURS, SHAPES, Attributes, Pair, Scene, Thing

# A pixel this far (RGB distance) from the background belongs to an object.
_FOREGROUND_DISTANCE = 60.0
# Regions smaller than this are specks (a generator's stray pixels), not objects.
_MIN_OBJECT_PIXELS = 12
# Sizes are nominal radii 6 and 11; split at their geometric mean.
_SIZE_SPLIT = math.sqrt(RADIUS["small"] * RADIUS["large"])
#: Size splits (pixels at 64 px) per world. The v1 world (32 px, radii 5 and 9, the shipped
#: generator's) has radii 10 and 18 once resized to 64: read with v2's split, its small shapes
#: would all be large. Positions scale alike in both worlds and need no split of their own.
SIZE_SPLITS = {"v2": _SIZE_SPLIT, "v1": 2 * math.sqrt(5.0 * 9.0)}
# One object sits 10 (large) or 16 (small) pixels from the middle, jittered by <= 1.5 per axis.
_CENTRE_RADIUS = 5.0


class Found(BaseModel):
    """One object the checker sees: what it is and where its centroid lies (pixels, y down)."""

    model_config = ConfigDict(frozen=True)

    thing: Thing
    x: float
    y: float
    pixels: int


class Reading(BaseModel):
    """Everything visible in an image: its background and its objects, largest first."""

    model_config = ConfigDict(frozen=True)

    background: str
    objects: list[Found]


class Match(BaseModel):
    """Which clauses of a one-object prompt the checker found in an image."""

    model_config = ConfigDict(frozen=True)

    colour: bool
    shape: bool
    size: bool
    position: bool
    background: bool

    @property
    def all_correct(self) -> bool:
        return all(self.clauses().values())

    def clauses(self) -> dict[str, bool]:
        """Verdict per clause, keyed as in :data:`~.scene.ATTRIBUTE_NAMES`."""
        return {"colour": self.colour, "shape": self.shape, "size": self.size,
                "position": self.position, "background": self.background}


class ThingMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    colour: bool
    shape: bool
    size: bool


class PairMatch(BaseModel):
    """Which clauses of a two-object prompt the checker found in an image."""

    model_config = ConfigDict(frozen=True)

    first: ThingMatch
    second: ThingMatch
    relation: bool
    background: bool
    #: Whether exactly two objects were seen (a third one makes the image wrong too).
    count: bool

    @property
    def all_correct(self) -> bool:
        return all(self.clauses().values())

    def clauses(self) -> dict[str, bool]:
        """Verdict per clause, keyed as in :data:`~.scene.PAIR_CLAUSES`, plus ``count``."""
        out = {f"{which}.{field}": getattr(getattr(self, which), field)
               for which in ("first", "second") for field in ("size", "colour", "shape")}
        return {**out, "relation": self.relation, "background": self.background,
                "count": self.count}


@functools.cache
def _area_per_r2(shape: str) -> float:
    r = 10.0
    return float(coverage(shape, IMAGE_SIZE / 2, IMAGE_SIZE / 2, r).sum()) / (r * r)


def _nearest(value: np.ndarray, palette: dict[str, tuple[int, int, int]]) -> str:
    names = list(palette)
    table = np.asarray([palette[n] for n in names], dtype=np.float32)
    return names[int(np.argmin(((table - value) ** 2).sum(axis=1)))]


def _soft_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of coverage maps: unlike thresholded masks, it does not jump at sub-pixel shifts."""
    union = np.maximum(a, b).sum()
    return float(np.minimum(a, b).sum() / union) if union else 0.0


def _shifts(x: np.ndarray) -> list[np.ndarray]:
    """The 8 neighbours of every pixel (edges padded with zeros)."""
    p = np.pad(x, 1)
    h, w = x.shape
    return [p[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
            for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]


def _components(mask: np.ndarray) -> list[np.ndarray]:
    """8-connected regions of ``mask``, largest first (a flood fill over the set pixels)."""
    todo = set(zip(*np.nonzero(mask), strict=True))
    regions = []
    while todo:
        stack = [todo.pop()]
        region = np.zeros_like(mask, dtype=bool)
        while stack:
            y, x = stack.pop()
            region[y, x] = True
            for n in ((y + dy, x + dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)):
                if n in todo:
                    todo.remove(n)
                    stack.append(n)
        regions.append(region)
    return sorted(regions, key=lambda r: -int(r.sum()))


def _read_object(px: np.ndarray, bg: np.ndarray, distance: np.ndarray,
                 region: np.ndarray, size_split: float) -> Found:
    # The far half of the region gives the colour, so anti-aliased edges don't pull it to bg.
    far = region & (distance >= np.median(distance[region]))
    fg = np.median(px[far], axis=0)
    # Coverage of each pixel near the region, from its place on the line from bg to fg.
    near = np.max([region, *_shifts(region)], axis=0)
    axis = fg - bg
    alpha = np.where(near, np.clip(((px - bg) @ axis) / float(axis @ axis), 0.0, 1.0), 0.0)
    area = float(alpha.sum())
    ys, xs = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float32) + 0.5
    cx, cy = float((alpha * xs).sum() / area), float((alpha * ys).sum() / area)
    best_shape, best_iou = SHAPES[0], -1.0
    for shape in SHAPES:
        r = math.sqrt(area / _area_per_r2(shape))
        iou = _soft_iou(alpha, coverage(shape, cx, cy, r))
        if iou > best_iou:
            best_shape, best_iou = shape, iou
    radius = math.sqrt(area / _area_per_r2(best_shape))
    thing = Thing(colour=_nearest(fg, COLOURS), shape=best_shape,
                  size="large" if radius > size_split else "small")
    return Found(thing=thing, x=cx, y=cy, pixels=int(region.sum()))


def read(image: Image.Image, world: str = "v2") -> Reading:
    """The background and every object that stands out in ``image``, sized as in ``world``
    (a key of :data:`SIZE_SPLITS`; images of the shipped v1 generator need ``"v1"``)."""
    if world not in SIZE_SPLITS:
        raise ValueError(f"unknown shapes world {world!r}; known: {', '.join(SIZE_SPLITS)}")
    size_split = SIZE_SPLITS[world]
    if image.size != (IMAGE_SIZE, IMAGE_SIZE):
        resample = (Image.Resampling.BOX if image.size[0] >= IMAGE_SIZE
                    else Image.Resampling.BILINEAR)
        image = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), resample)
    px = to_array(image)
    border = np.concatenate([px[0], px[-1], px[1:-1, 0], px[1:-1, -1]])
    bg = np.median(border, axis=0)
    distance = np.sqrt(((px - bg) ** 2).sum(axis=-1))
    regions = [r for r in _components(distance > _FOREGROUND_DISTANCE)
               if r.sum() >= _MIN_OBJECT_PIXELS]
    return Reading(background=_nearest(bg, BACKGROUNDS),
                   objects=[_read_object(px, bg, distance, r, size_split)
                            for r in regions])


def _position(found: Found) -> str:
    dx, dy = found.x - IMAGE_SIZE / 2, found.y - IMAGE_SIZE / 2
    if max(abs(dx), abs(dy)) < _CENTRE_RADIUS:
        return "centre"
    if abs(dx) >= abs(dy):
        return "left" if dx < 0 else "right"
    return "top" if dy < 0 else "bottom"


def _relation(a: Found, b: Found) -> str:
    """Where ``a`` stands relative to ``b``, along the axis they differ most in."""
    dx, dy = a.x - b.x, a.y - b.y
    if abs(dx) >= abs(dy):
        return "left of" if dx < 0 else "right of"
    return "above" if dy < 0 else "below"


def scene_of(reading: Reading, objects: int) -> Scene | None:
    """The ``objects``-object scene in a reading (its largest objects; of two, the larger is
    named first), or ``None`` when fewer objects are visible."""
    if len(reading.objects) < objects:
        return None
    if objects == 1:
        main = reading.objects[0]
        return Attributes(colour=main.thing.colour, shape=main.thing.shape,
                          size=main.thing.size, position=_position(main),
                          background=reading.background)
    a, b = reading.objects[:2]
    return Pair(first=a.thing, relation=_relation(a, b), second=b.thing,
                background=reading.background)


def check(image: Image.Image, world: str = "v2") -> Attributes | None:
    """The one-object scene visible in ``image`` (its largest object), or ``None`` if none."""
    found = scene_of(read(image, world), 1)
    assert found is None or isinstance(found, Attributes)
    return found


def check_pair(image: Image.Image) -> Pair | None:
    """The two-object scene visible in ``image``, or ``None`` with fewer than two objects."""
    found = scene_of(read(image), 2)
    assert found is None or isinstance(found, Pair)
    return found


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


def _thing_match(expected: Thing, found: Found | None) -> ThingMatch:
    if found is None:
        return ThingMatch(colour=False, shape=False, size=False)
    t = found.thing
    return ThingMatch(colour=t.colour == expected.colour, shape=t.shape == expected.shape,
                      size=t.size == expected.size)


def _grade_pair(expected: Pair, reading: Reading) -> PairMatch:
    objs = reading.objects[:2]
    background = reading.background == expected.background
    if len(objs) < 2:
        return PairMatch(first=_thing_match(expected.first, objs[0] if objs else None),
                         second=_thing_match(expected.second, None), relation=False,
                         background=background, count=False)
    # Name the two objects the way that agrees with the most clauses (ties: the relation
    # decides, so identical objects are never penalised for which one is "first").
    best: PairMatch | None = None
    for a, b in (objs, objs[::-1]):
        m = PairMatch(first=_thing_match(expected.first, a),
                      second=_thing_match(expected.second, b),
                      relation=_relation(a, b) == expected.relation, background=background,
                      count=len(reading.objects) == 2)
        if best is None or sum(m.clauses().values()) > sum(best.clauses().values()):
            best = m
    assert best is not None
    return best


def grade(expected: Scene, image: Image.Image | Reading,
          world: str = "v2") -> Match | PairMatch:
    """Per-clause verdicts of an image (or its :func:`read`) against the prompt's scene."""
    reading = image if isinstance(image, Reading) else read(image, world)
    if isinstance(expected, Attributes):
        found = scene_of(reading, 1)
        assert found is None or isinstance(found, Attributes)
        return compare(expected, found)
    return _grade_pair(expected, reading)
