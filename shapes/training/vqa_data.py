"""Training data of ``shapes-vqa``: the generator's own images, questions about them, the
checker's answers.

The judge must be right about the images loops actually make, so its data is the shipped
generator's output at full steps and as 4-step drafts (loops judge both), not clean renders:
a half-drawn star is what it has to call a star or not. Prompts are mining's training-mix
scenes (:func:`.mining.mining_scenes` refuses held-out seeds and the mix holds no held-out
colour-shape pair), from a seed range of their own; labels come from mining's checker path
(:func:`.mining.clause_verdicts`), never from a second one.

Per image, the questions are: every clause of its own caption; every clause of what the checker
read in it, when that is another complete scene (positives for failed images); each clause of
the caption asked with every other value (one clause at a time, from
``shapes.one_attribute_variants``: the hard negatives); for two objects, the caption with its
objects swapped, whole (so "first" has to mean the object the caption puts first).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from PIL import Image
from pydantic import BaseModel

from genloop.evaluators.vqa_model import clause_names, encode_question
from genloop.shapes.scene import Pair, Scene, one_attribute_variants, parse_caption

from .mining import MiningConfig, clause_verdicts, generate, mining_scenes, verdict

logger = logging.getLogger(__name__)


class VqaDataConfig(BaseModel):
    """How many images to draw; the defaults take about 17 minutes of two busy CPU threads."""

    prompts: int = 2000
    #: images per prompt at ``steps`` and as drafts at ``draft_steps``
    full_seeds: int = 1
    draft_seeds: int = 3
    steps: int = 20
    draft_steps: int = 4
    guidance: float = 2.0
    batch: int = 64
    #: training seeds that neither mining (700,000,000 on) nor any model's pool uses
    seed_offset: int = 720_000_000

    @classmethod
    def smoke(cls) -> VqaDataConfig:
        return cls(prompts=4, full_seeds=1, draft_seeds=1, steps=2, draft_steps=1, batch=8)


class Pool(BaseModel):
    """Captions and whether each image is a draft, row for row with the images array."""

    captions: list[str]
    draft: list[bool]


class Questions(BaseModel, arbitrary_types_allowed=True):
    """Every question of a pool as arrays: which image, the encoded question, the checker's
    answer, and whether it is about the image's own caption (what a judge is asked)."""

    image: np.ndarray  # int32 (Q,)
    vector: np.ndarray  # uint8 (Q, QUESTION_SIZE)
    label: np.ndarray  # uint8 (Q,)
    own: np.ndarray  # bool (Q,)


def draw_pool(pipe, cfg: VqaDataConfig) -> tuple[Pool, np.ndarray]:
    """Generate the pool: each prompt ``full_seeds`` times at full steps, ``draft_seeds``
    times as a draft (other seeds)."""
    began = time.monotonic()
    scenes = mining_scenes(MiningConfig(prompts=cfg.prompts, seed_offset=cfg.seed_offset))
    captions, draft, parts = [], [], []
    for steps, seeds, first, is_draft in ((cfg.steps, cfg.full_seeds, 0, False),
                                          (cfg.draft_steps, cfg.draft_seeds, cfg.full_seeds,
                                           True)):
        rows = [s.caption() for s in scenes for _ in range(seeds)]
        seed_of = [first + i % seeds for i in range(len(rows))]
        parts.append(generate(pipe, rows, seed_of, steps, cfg.guidance, cfg.batch))
        captions += rows
        draft += [is_draft] * len(rows)
        logger.info("drew %d images at %d steps (%.0fs)", len(rows), steps,
                    time.monotonic() - began)
    return Pool(captions=captions, draft=draft), np.concatenate(parts)


def load_or_draw(directory: Path, cfg: VqaDataConfig, device: str = "cpu") -> tuple[
        Pool, np.ndarray]:
    """The pool cached in ``directory`` (``pool.json``, ``images.npy``), drawn first if absent."""
    meta, array = directory / "pool.json", directory / "images.npy"
    if meta.exists() and array.exists():
        return Pool.model_validate_json(meta.read_text()), np.load(array)
    from diffusers import StableDiffusionPipeline

    from genloop import shapes

    pipe = StableDiffusionPipeline.from_pretrained(str(shapes.pipeline_path())).to(device)
    pipe.set_progress_bar_config(disable=True)
    pool, images = draw_pool(pipe, cfg)
    directory.mkdir(parents=True, exist_ok=True)
    np.save(array, images)
    meta.write_text(pool.model_dump_json())
    return pool, images


def image_questions(caption: str, image: Image.Image) -> list[tuple[np.ndarray, bool, bool]]:
    """``(question vector, checker's answer, own caption?)`` for every question of one image."""
    scene = parse_caption(caption)
    asked: list[tuple[Scene, str | None, bool]] = [(scene, None, True)]  # None: every clause
    reading = verdict(scene, image).reading
    if reading is not None and reading != caption:
        asked.append((parse_caption(reading), None, False))
    for name in clause_names(scene):
        if name != "count":
            asked += [(v, name, False) for v in one_attribute_variants(scene, name)]
    if isinstance(scene, Pair):
        asked += [(v, None, False) for v in one_attribute_variants(scene, "order")]
    found = clause_verdicts([s for s, _, _ in asked], image)
    out = []
    for (s, only, own), verdicts in zip(asked, found, strict=True):
        for name in clause_names(s) if only is None else (only,):
            out.append((encode_question(s, name), verdicts[name], own))
    return out


def label_pool(pool: Pool, images: np.ndarray) -> Questions:
    """:func:`image_questions` for every image of the pool, as arrays."""
    began = time.monotonic()
    index, vectors, labels, own = [], [], [], []
    for i, caption in enumerate(pool.captions):
        for vector, answer, mine in image_questions(caption, Image.fromarray(images[i])):
            index.append(i)
            vectors.append(vector)
            labels.append(answer)
            own.append(mine)
    logger.info("labelled %d questions of %d images (%.0fs)", len(index), len(images),
                time.monotonic() - began)
    return Questions(image=np.asarray(index, dtype=np.int32),
                     vector=np.stack(vectors).astype(np.uint8),
                     label=np.asarray(labels, dtype=np.uint8), own=np.asarray(own, dtype=bool))
