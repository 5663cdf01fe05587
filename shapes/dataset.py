"""Procedural shapes world v2: one or two flat shapes on a plain background, 64x64 RGB, captioned.

Every sample is a pure function of its seed, so the data set is generated on the fly and a
held-out split is just another range of seeds. Two splits test generalisation:

- held-out seeds (:func:`heldout_prompts`): the training distribution, never-seen seeds;
- held-out combinations (:func:`novel_prompts`): colour-shape pairs in :data:`HELDOUT_COMBOS`
  never appear in any training image or caption, of either model.

Geometry is chosen so two large stars fit side by side with background between them and around
them (the checker separates objects by connected components and reads the background from the
border).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence

import numpy as np
from PIL import Image, ImageDraw
from pydantic import BaseModel, ConfigDict

from .scene import (
    ATTRIBUTE_NAMES,
    BACKGROUNDS,
    COLOURS,
    PAIR_CLAUSES,
    POSITIONS,
    RELATIONS,
    SHAPES,
    SIZES,
    Attributes,
    Pair,
    Scene,
    Thing,
    one_attribute_variants,
    parse_caption,
)

IMAGE_SIZE = 64
# Shapes are drawn at 4x and box-filtered down: edges are anti-aliased like a real photo's,
# and a sub-pixel position jitter becomes visible to the models.
SUPERSAMPLE = 4

#: Nominal radius (pixels) of each size; one object sits this far from the centre per position.
RADIUS = {"small": 6.0, "large": 11.0}
OFFSET = {"small": 16.0, "large": 10.0}
JITTER = 1.5
#: Two objects: centres this far either side of the middle along the relation's axis, the pair
#: moved together by up to PAIR_SHIFT across it and each object by up to JITTER / 2 more.
PAIR_HALF_GAP = 15.0
PAIR_SHIFT = 3.0
_DIRECTION = {"centre": (0, 0), "left": (-1, 0), "right": (1, 0), "top": (0, -1), "bottom": (0, 1)}
#: Where ``first`` sits relative to ``second`` for each relation (unit vector, y down).
RELATION_DIRECTION = {"left of": (-1, 0), "right of": (1, 0), "above": (0, -1), "below": (0, 1)}

#: Colour-shape combinations held out of all training data (both objects, both models).
HELDOUT_COMBOS = frozenset({("yellow", "star"), ("purple", "triangle"), ("cyan", "square"),
                            ("green", "circle")})
#: Seeds below this are training data; held-out samples use seeds from here on.
HELDOUT_SEED_START = 1_000_000_000
#: Share of two-object scenes in the training mix.
PAIR_SHARE = 0.5


def shape_polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    """Vertices of a polygonal shape whose centroid is (cx, cy); y grows downwards."""
    if shape == "square":
        h = 0.9 * r
        return [(cx - h, cy - h), (cx + h, cy - h), (cx + h, cy + h), (cx - h, cy + h)]
    if shape == "triangle":
        big = 1.15 * r  # circumradius; an equilateral triangle's centroid is its circumcentre
        return [(cx + big * math.cos(math.radians(a)), cy + big * math.sin(math.radians(a)))
                for a in (-90.0, 30.0, 150.0)]
    if shape == "star":
        outer, inner = 1.2 * r, 0.5 * r
        return [(cx + (outer if k % 2 == 0 else inner) * math.cos(math.radians(-90.0 + 36.0 * k)),
                 cy + (outer if k % 2 == 0 else inner) * math.sin(math.radians(-90.0 + 36.0 * k)))
                for k in range(10)]
    raise ValueError(f"not a polygon shape: {shape!r}")


def coverage(shape: str, cx: float, cy: float, r: float, size: int = IMAGE_SIZE) -> np.ndarray:
    """Fraction of each pixel covered by the shape, float32 ``(size, size)`` in [0, 1].

    Coordinates are in pixels of the final image; pixel (i, j) spans [j, j+1) x [i, i+1).
    """
    if shape != "circle":
        return polygon_coverage(shape_polygon(shape, cx, cy, r), size)
    s = SUPERSAMPLE
    canvas = Image.new("L", (size * s, size * s), 0)
    ImageDraw.Draw(canvas).ellipse([(cx - r) * s, (cy - r) * s, (cx + r) * s - 1,
                                    (cy + r) * s - 1], fill=255)
    return _downsampled(canvas, size)


def polygon_coverage(vertices: Sequence[tuple[float, float]],
                     size: int = IMAGE_SIZE) -> np.ndarray:
    """:func:`coverage` of any polygon, its ``vertices`` in pixels of the final image."""
    s = SUPERSAMPLE
    canvas = Image.new("L", (size * s, size * s), 0)
    # PIL fills the pixels whose index lies inside; the -0.5 puts the polygon in the same
    # continuous frame as the ellipse (pixel k spans [k, k+1)), so centroids are unbiased.
    ImageDraw.Draw(canvas).polygon([(x * s - 0.5, y * s - 0.5) for x, y in vertices], fill=255)
    return _downsampled(canvas, size)


def _downsampled(canvas: Image.Image, size: int) -> np.ndarray:
    small = canvas.resize((size, size), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.float32) / 255.0


def _paint(things: Sequence[tuple[Thing, float, float]], background: str) -> Image.Image:
    pixels = np.broadcast_to(np.asarray(BACKGROUNDS[background], dtype=np.float32),
                             (IMAGE_SIZE, IMAGE_SIZE, 3)).copy()
    for thing, cx, cy in things:
        alpha = coverage(thing.shape, cx, cy, RADIUS[thing.size])[..., None]
        pixels = alpha * np.asarray(COLOURS[thing.colour], dtype=np.float32) + (1 - alpha) * pixels
    return Image.fromarray(np.round(pixels).astype(np.uint8))


def render(scene: Scene, jitter: Sequence[float] = (0.0, 0.0, 0.0, 0.0, 0.0)) -> Image.Image:
    """Draw ``scene``. ``jitter``: one object (dx, dy, ...); two (shift, dx1, dy1, dx2, dy2)."""
    mid = IMAGE_SIZE / 2
    if isinstance(scene, Attributes):
        ux, uy = _DIRECTION[scene.position]
        off = OFFSET[scene.size]
        return _paint([(scene.thing, mid + ux * off + jitter[0], mid + uy * off + jitter[1])],
                      scene.background)
    ux, uy = RELATION_DIRECTION[scene.relation]
    shift, d1x, d1y, d2x, d2y = jitter
    # Along the relation's axis the pair is centred; across it both move by ``shift``.
    sx, sy = (0.0, shift) if uy == 0 else (shift, 0.0)
    first = (scene.first, mid + ux * PAIR_HALF_GAP + sx + d1x, mid + uy * PAIR_HALF_GAP + sy + d1y)
    second = (scene.second, mid - ux * PAIR_HALF_GAP + sx + d2x,
              mid - uy * PAIR_HALF_GAP + sy + d2y)
    return _paint([first, second], scene.background)


class Sample(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    seed: int
    #: The scene drawn: :class:`Attributes` (one object) or :class:`Pair` (two).
    attributes: Scene
    caption: str
    image: Image.Image


def _thing(rng: random.Random, allow_heldout: bool) -> Thing:
    while True:
        thing = Thing(colour=rng.choice(list(COLOURS)), shape=rng.choice(SHAPES),
                      size=rng.choice(SIZES))
        if allow_heldout or (thing.colour, thing.shape) not in HELDOUT_COMBOS:
            return thing


def _scene(rng: random.Random, objects: int, allow_heldout: bool) -> Scene:
    if objects == 1:
        thing = _thing(rng, allow_heldout)
        return Attributes(colour=thing.colour, shape=thing.shape, size=thing.size,
                          position=rng.choice(POSITIONS), background=rng.choice(list(BACKGROUNDS)))
    if objects == 2:
        first, second = _thing(rng, allow_heldout), _thing(rng, allow_heldout)
        return Pair(first=first, relation=rng.choice(RELATIONS), second=second,
                    background=rng.choice(list(BACKGROUNDS)))
    raise ValueError(f"a shapes scene has 1 or 2 objects, not {objects}")


def _draw(seed: int, rng: random.Random, scene: Scene) -> Sample:
    if isinstance(scene, Attributes):
        jitter = [rng.uniform(-JITTER, JITTER) for _ in range(2)]
    else:
        half = JITTER / 2
        jitter = [rng.uniform(-PAIR_SHIFT, PAIR_SHIFT)] + [rng.uniform(-half, half)
                                                           for _ in range(4)]
    return Sample(seed=seed, attributes=scene, caption=scene.caption(),
                  image=render(scene, jitter))


def sample(seed: int, objects: int = 1) -> Sample:
    """The ``objects``-object sample for ``seed``: same seed, same pixels, on any machine.

    Held-out combinations never occur here; :func:`novel_prompts` has them.
    """
    rng = random.Random(seed * 4 + objects)
    return _draw(seed, rng, _scene(rng, objects, allow_heldout=False))


def training_sample(seed: int) -> Sample:
    """The training mix: one or two objects (:data:`PAIR_SHARE` of the time), by seed."""
    if seed >= HELDOUT_SEED_START:
        raise ValueError(f"seed {seed} is held out; training seeds are below {HELDOUT_SEED_START}")
    objects = 2 if random.Random(seed * 4 + 3).random() < PAIR_SHARE else 1
    return sample(seed, objects)


def sample_scene(scene: Scene, seed: int) -> Sample:
    """A render of a given scene with the jitter of ``seed``."""
    return _draw(seed, random.Random(seed * 4 + 3), scene)


def train_seeds(start: int = 0) -> Iterator[int]:
    """Endless training seeds (all below :data:`HELDOUT_SEED_START`)."""
    seed = start
    while seed < HELDOUT_SEED_START:
        yield seed
        seed += 1


def heldout_seeds(n: int, start: int = 0) -> list[int]:
    """``n`` held-out seeds; disjoint from every training seed."""
    return [HELDOUT_SEED_START + start + i for i in range(n)]


def heldout_prompts(n: int, start: int = 0, objects: int = 1) -> list[Scene]:
    """Scenes of ``n`` held-out samples (``objects`` 1 or 2), for prompting a generator."""
    return [sample(s, objects).attributes for s in heldout_seeds(n, start)]


def novel_prompts(n: int, objects: int = 1, start: int = 0) -> list[Scene]:
    """``n`` held-out scenes in which at least one object is a held-out colour-shape combination."""
    out: list[Scene] = []
    seed = HELDOUT_SEED_START // 2 + start  # its own stream, away from the seeded samples
    while len(out) < n:
        rng = random.Random(seed * 4 + objects)
        scene = _scene(rng, objects, allow_heldout=True)
        if any((t.colour, t.shape) in HELDOUT_COMBOS for t in scene.things):
            out.append(scene)
        seed += 1
    return out


def is_novel(scene: Scene) -> bool:
    """Whether ``scene`` holds a colour-shape combination that no training data has."""
    return any((t.colour, t.shape) in HELDOUT_COMBOS for t in scene.things)


def to_array(image: Image.Image) -> np.ndarray:
    """``(H, W, 3)`` float32 in [0, 255] from any PIL image."""
    return np.asarray(image.convert("RGB"), dtype=np.float32)


def render_pool(seeds: Sequence[int], workers: int = 1) -> tuple[np.ndarray, list[str]]:
    """Training images as uint8 ``(N, 64, 64, 3)`` and their captions, rendered once.

    Models train from such a pool rather than rendering per step (rendering would cost as
    much as the small models' steps); ``workers`` > 1 renders in that many processes.
    """
    seeds = list(seeds)
    if workers > 1 and len(seeds) > 1024:
        from concurrent.futures import ProcessPoolExecutor

        chunks = [seeds[i:i + 1024] for i in range(0, len(seeds), 1024)]
        with ProcessPoolExecutor(workers) as pool:
            parts = list(pool.map(render_pool, chunks))
        return (np.concatenate([p[0] for p in parts]), [c for p in parts for c in p[1]])
    samples = [training_sample(s) for s in seeds]
    images = np.stack([np.asarray(s.image, dtype=np.uint8) for s in samples])
    return images, [s.caption for s in samples]


__all__ = [
    "ATTRIBUTE_NAMES", "BACKGROUNDS", "COLOURS", "HELDOUT_COMBOS", "HELDOUT_SEED_START",
    "IMAGE_SIZE", "PAIR_CLAUSES", "POSITIONS", "RADIUS", "RELATIONS", "SHAPES", "SIZES",
    "Attributes", "Pair", "Sample", "Scene", "Thing", "coverage", "heldout_prompts",
    "heldout_seeds", "is_novel", "novel_prompts", "one_attribute_variants", "parse_caption",
    "render", "render_pool", "sample", "sample_scene", "train_seeds", "training_sample",
    "to_array",
]
