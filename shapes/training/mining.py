"""Mine hard negatives for shapes-clip from the generator's own images, labelled by the checker.

The only labels are the checker's verdicts on generated images: an image passes when every
clause of its prompt is found, and a failed image also gets what the checker read in it (when
it read a complete scene of the prompt's kind). Prompts come from training seeds only
(:func:`mining_scenes` refuses held-out ones, and the training mix never holds a held-out
colour-shape combination), so no held-out data reaches the verifier.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
from PIL import Image
from pydantic import BaseModel

from genloop.shapes import world_of
from genloop.shapes.checker import grade, read, scene_of
from genloop.shapes.dataset import HELDOUT_SEED_START, training_sample
from genloop.shapes.scene import Scene, parse_caption

logger = logging.getLogger(__name__)


class MiningConfig(BaseModel):
    prompts: int = 256
    images_per_prompt: int = 8
    # A range of training seeds that neither model's pool uses.
    seed_offset: int = 700_000_000
    steps: int = 20
    guidance: float = 2.0
    batch: int = 64

    @classmethod
    def smoke(cls) -> MiningConfig:
        return cls(prompts=2, images_per_prompt=2, steps=2, batch=4)


class Verdict(BaseModel):
    """The checker's verdict on one generated image."""

    correct: bool
    #: Caption of what the checker read, when it read a complete scene of the prompt's kind.
    reading: str | None


class Mined(BaseModel):
    """Generated images (kept beside this, row for row) with their prompts and verdicts."""

    prompts: list[str]
    correct: list[bool]
    readings: list[str | None]
    images_per_prompt: int

    def groups(self) -> list[list[int]]:
        """Rows of each prompt's images, in prompt order."""
        k = self.images_per_prompt
        return [list(range(i, i + k)) for i in range(0, len(self.prompts), k)]

    @property
    def pass_rate(self) -> float:
        return sum(self.correct) / max(1, len(self.correct))


def mining_scenes(cfg: MiningConfig) -> list[Scene]:
    """The prompts to mine: training-mix scenes of ``cfg.prompts`` training seeds."""
    end = cfg.seed_offset + cfg.prompts
    if end > HELDOUT_SEED_START:
        raise ValueError(f"mining seeds must stay below {HELDOUT_SEED_START} (held out); "
                         f"got up to {end}")
    return [training_sample(s).attributes for s in range(cfg.seed_offset, end)]


def verdict(scene: Scene, image: Image.Image) -> Verdict:
    """Pass or fail by :func:`..checker.grade`, and what the checker read in a failed image."""
    reading = read(image, world_of(image.width))
    if grade(scene, reading).all_correct:
        return Verdict(correct=True, reading=None)
    objects = len(scene.things)
    found = scene_of(reading, objects) if len(reading.objects) == objects else None
    return Verdict(correct=False, reading=found.caption() if found is not None else None)


def clause_verdicts(scenes: Sequence[Scene], image: Image.Image) -> list[dict[str, bool]]:
    """Per-clause verdicts (:meth:`Match.clauses` / :meth:`PairMatch.clauses`, ``count``
    included) of one image against several captions: a judge's questions about the prompt and
    about captions one clause away from it, each labelled by the checker, read once."""
    reading = read(image, world_of(image.width))
    return [grade(scene, reading).clauses() for scene in scenes]


def _verdict_rows(args: tuple[list[str], np.ndarray]) -> list[Verdict]:
    captions, images = args
    return [verdict(parse_caption(c), Image.fromarray(im)) for c, im in zip(captions, images,
                                                                           strict=True)]


def verdicts(captions: Sequence[str], images: np.ndarray, workers: int = 1) -> list[Verdict]:
    """:func:`verdict` for uint8 ``(N, H, W, 3)`` images, in ``workers`` processes."""
    captions = list(captions)
    if workers <= 1 or len(captions) < 256:
        return _verdict_rows((captions, images))
    from concurrent.futures import ProcessPoolExecutor

    step = -(-len(captions) // workers)
    chunks = [(captions[i:i + step], images[i:i + step]) for i in range(0, len(captions), step)]
    with ProcessPoolExecutor(workers) as pool:
        return [v for part in pool.map(_verdict_rows, chunks) for v in part]


def generate(pipe, prompts: Sequence[str], seeds: Sequence[int], steps: int, guidance: float,
             batch: int) -> np.ndarray:
    """uint8 ``(N, H, W, 3)`` images, one per (prompt, seed); seeds drive CPU generators."""
    import torch

    out = []
    for lo in range(0, len(prompts), batch):
        images = pipe(list(prompts[lo:lo + batch]), num_inference_steps=steps,
                      guidance_scale=guidance, output_type="np",
                      generator=[torch.Generator().manual_seed(s)
                                 for s in seeds[lo:lo + batch]]).images
        out.append((np.asarray(images) * 255).round().astype(np.uint8))
    return np.concatenate(out)


def mine(pipe, cfg: MiningConfig, workers: int = 1) -> tuple[Mined, np.ndarray]:
    """Generate ``images_per_prompt`` images per mining prompt and label them by the checker."""
    began = time.monotonic()
    k = cfg.images_per_prompt
    captions = [s.caption() for s in mining_scenes(cfg) for _ in range(k)]
    seeds = [i % k for i in range(len(captions))]
    images = generate(pipe, captions, seeds, cfg.steps, cfg.guidance, cfg.batch)
    found = verdicts(captions, images, workers)
    mined = Mined(prompts=captions, correct=[v.correct for v in found],
                  readings=[v.reading for v in found], images_per_prompt=k)
    logger.info("mined %d images, %.3f pass the checker (%.0fs)", len(captions),
                mined.pass_rate, time.monotonic() - began)
    return mined, images
