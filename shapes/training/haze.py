"""Training renders with faint blotches, for ``shapes-reader`` to learn what the checker counts.

The shipped generator leaves faint specks and haze on its images, often beside an object. The
checker counts any 8-connected region of 12 pixels or more that stands further than
:data:`~genloop.shapes.checker.FOREGROUND_DISTANCE` from the background as an object, so a
wrong image with such a third "object" (a patch of green haze beside a yellow circle) is one a
reader trained on images far from that line reads as right. These are clean training renders
with one to three soft, grainy blotches of any shapes colour whose peak stands out from the
background by half to one and a half times that distance, so some cross the line and some do
not. As with the boundary drawings nothing here says what an image holds: the checker reads it
(:func:`.train_reader.label`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from PIL import Image

from genloop.shapes.checker import FOREGROUND_DISTANCE
from genloop.shapes.dataset import HELDOUT_SEED_START, IMAGE_SIZE, to_array, training_sample
from genloop.shapes.scene import BACKGROUNDS, COLOURS

#: Blotches per image and their odds.
_COUNTS, _COUNT_ODDS = (1, 2, 3), (0.5, 0.3, 0.2)
#: A blotch's radius in pixels, and its peak's distance from the background as a share of the
#: checker's foreground distance.
_RADIUS, _PEAK = (1.5, 6.0), (0.6, 1.8)
#: Each pixel's share of a blotch varies by up to this much either way, as the generator's
#: haze is grainy, not smooth.
_GRAIN = 0.4
#: Share of blotches put beside an object (the rest go anywhere), where the generator's haze
#: mostly lies and where a blotch that touches the object is part of it.
_BESIDE = 0.5


def hazed_render(seed: int) -> Image.Image:
    """The training render of ``seed`` with blotches drawn from the same seed: same seed, same
    pixels."""
    if not 0 <= seed < HELDOUT_SEED_START:
        raise ValueError(f"seed {seed} is not a training seed (0 to {HELDOUT_SEED_START - 1})")
    sample = training_sample(seed)
    rng = random.Random(seed)
    grain = np.random.default_rng(seed)
    pixels = to_array(sample.image)
    background = np.asarray(BACKGROUNDS[sample.attributes.background], dtype=np.float32)
    ys, xs = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE].astype(np.float32) + 0.5
    inside = np.sqrt(((pixels - background) ** 2).sum(-1)) > FOREGROUND_DISTANCE
    objects = list(zip(xs[inside], ys[inside], strict=True))
    for _ in range(rng.choices(_COUNTS, _COUNT_ODDS)[0]):
        colour = np.asarray(rng.choice(list(COLOURS.values())), dtype=np.float32)
        radius = rng.uniform(*_RADIUS)
        if rng.random() < _BESIDE:  # a few pixels out from one of the objects' pixels
            x, y = rng.choice(objects)
            turn, reach = rng.uniform(0, 2 * np.pi), rng.uniform(0.5 * radius, radius + 4)
            cx = float(np.clip(x + reach * np.cos(turn), 0, IMAGE_SIZE))
            cy = float(np.clip(y + reach * np.sin(turn), 0, IMAGE_SIZE))
        else:
            cx, cy = rng.uniform(0, IMAGE_SIZE), rng.uniform(0, IMAGE_SIZE)
        # the share of `colour` whose blend with the background stands out by `peak` x the line
        contrast = float(np.linalg.norm(colour - background))
        peak = rng.uniform(*_PEAK) * FOREGROUND_DISTANCE / contrast
        falloff = np.sqrt(np.clip(1 - np.hypot(xs - cx, ys - cy) / radius, 0, None))
        jitter = grain.uniform(1 - _GRAIN, 1 + _GRAIN, falloff.shape)
        alpha = np.clip(peak * falloff * jitter, 0, 1)[..., None]
        pixels = alpha * colour + (1 - alpha) * pixels
    return Image.fromarray(np.round(pixels).astype(np.uint8))


def haze_pool(seeds: Sequence[int]) -> np.ndarray:
    """uint8 ``(N, 64, 64, 3)``: :func:`hazed_render` of each seed."""
    return np.stack([np.asarray(hazed_render(s), dtype=np.uint8) for s in seeds])
