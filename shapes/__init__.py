"""Shapes world: a tiny text-to-image model and CLIP, trained here, graded by pixel geometry.

Public API for other parts of genloop (refiners, critics, benchmarks):

- captions: :class:`Attributes` (one object), :class:`Pair` (two, with a relation),
  :func:`parse_caption`, :func:`one_attribute_variants`;
- grading: :func:`grade` (per-clause :class:`Match` / :class:`PairMatch`), :func:`read`;
- prompt sets: :func:`heldout_prompts` (``objects=1|2``), :func:`novel_prompts` (colour-shape
  combinations no model was trained on).

Random-weight models draw noise, so nothing about a loop's quality could be judged with them.
The shapes models are small enough to train on a CPU in minutes and to ship inside the package,
and every image they make can be checked against its prompt by :func:`check`.

Registries load them through the ordinary code paths::

    StableDiffusionPipeline.from_pretrained(pipeline_path())
    open_clip.create_model_and_transforms(
        register_clip_config(), pretrained=str(clip_checkpoint_path()))

Importing this package imports neither torch nor open_clip.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from .checker import (
    Found,
    Match,
    PairMatch,
    Reading,
    ThingMatch,
    check,
    check_pair,
    compare,
    grade,
    read,
    scene_of,
)
from .dataset import (
    HELDOUT_COMBOS,
    IMAGE_SIZE,
    Sample,
    heldout_prompts,
    heldout_seeds,
    is_novel,
    novel_prompts,
    sample,
    sample_scene,
)
from .scene import (
    ATTRIBUTE_NAMES,
    PAIR_CLAUSES,
    Attributes,
    Pair,
    Scene,
    Thing,
    one_attribute_variants,
    parse_caption,
)

#: Model names the generation and evaluator registries should use.
PIPELINE_NAME = "shapes"
CLIP_MODEL_NAME = "shapes-clip"
#: Sampling defaults, chosen with
#: ``python -m genloop.shapes.training.evaluate --guidance 1.5 2 3 4`` on 200 held-out prompts at
#: 20 DDIM steps: guidance 2 had the best all-correct rate (0.805; 1.5: 0.78, 3: 0.795, 4: 0.75,
#: where colours start to oversaturate).
DEFAULT_STEPS = 20
DEFAULT_GUIDANCE = 2.0
#: The best loop measured on this model, what ``Loop(prompt=...)`` runs here (see
#: :meth:`genloop.sdk.Loop.with_recipe`): 4-step drafts, 8 a round, judged by shapes-reader,
#: within best-of-24's 480 denoising steps; it stops at the first round whose best draft the
#: reader all but certainly finds right (97), and gives a prompt up after 4 rounds in which no
#: draft reached even 50 (one the model rarely draws right). The stopping rule was chosen on
#: 300 calibration prompts (``benchmarks/stop_rules.py``, docs/judges.md): on the benchmark's
#: prompts 0.85 all-correct against 0.81 for the rule before it (target 50, no give-up) at as
#: many drafts a prompt, and best-of-24's 0.68 by shapes-clip.
RECIPE: dict[str, Any] = {"evaluator": "shapes-reader", "steps": 4, "candidates": 8,
                          "rounds": 15, "target": 97.0,
                          "give_up": {"rounds": 4, "below": 50.0}, "budget": 480}


def weights_dir() -> Path:
    return Path(str(files(__name__).joinpath("weights")))


def pipeline_path() -> Path:
    """Directory of the shipped ``StableDiffusionPipeline`` (pass to ``from_pretrained``)."""
    return weights_dir() / "shapes-sd"


def clip_config_path() -> Path:
    return weights_dir() / CLIP_MODEL_NAME / f"{CLIP_MODEL_NAME}.json"


def clip_config() -> dict[str, Any]:
    """The open_clip model config of shapes-clip (``embed_dim``, ``vision_cfg``, ``text_cfg``)."""
    return json.loads(clip_config_path().read_text())


def clip_checkpoint_path() -> Path:
    """The shipped shapes-clip weights, for ``open_clip.create_model(..., pretrained=...)``."""
    return weights_dir() / CLIP_MODEL_NAME / "open_clip_model.safetensors"


def register_clip_config() -> str:
    """Add the shipped config to open_clip's model list (once) and return the model name."""
    from .models import register_clip_config as register

    return register(clip_config_path())


def shipped_image_size() -> int:
    """Image size the shipped pipeline draws (32: the v1 world, 64: v2), from its configs."""
    unet = json.loads((pipeline_path() / "unet" / "config.json").read_text())
    vae = json.loads((pipeline_path() / "vae" / "config.json").read_text())
    return int(unet["sample_size"]) * 2 ** (len(vae["block_out_channels"]) - 1)


def world_of(image_size: int) -> str:
    """The world a generated image of ``image_size`` pixels comes from, for the checker's
    ``world``: "v1" (32 px, the shipped generator's) or "v2" (64 px)."""
    return "v1" if image_size == 32 else "v2"


__all__ = [
    "ATTRIBUTE_NAMES",
    "CLIP_MODEL_NAME",
    "Found",
    "HELDOUT_COMBOS",
    "IMAGE_SIZE",
    "PAIR_CLAUSES",
    "Pair",
    "PairMatch",
    "Reading",
    "Scene",
    "Thing",
    "ThingMatch",
    "check_pair",
    "grade",
    "is_novel",
    "novel_prompts",
    "one_attribute_variants",
    "read",
    "sample_scene",
    "scene_of",
    "shipped_image_size",
    "world_of",
    "DEFAULT_GUIDANCE",
    "DEFAULT_STEPS",
    "RECIPE",
    "PIPELINE_NAME",
    "Attributes",
    "Match",
    "Sample",
    "check",
    "clip_checkpoint_path",
    "clip_config",
    "clip_config_path",
    "compare",
    "heldout_prompts",
    "heldout_seeds",
    "parse_caption",
    "pipeline_path",
    "register_clip_config",
    "sample",
    "weights_dir",
]

if __name__ != "genloop.shapes":  # imported as a bare `shapes` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
