"""Simulated models: pipelines that sleep instead of computing, for load tests of a pool.

A pool's behaviour (which worker loads what, how long work waits, how busy each worker is)
depends on how long loads and batches take and how much memory a model holds, not on the
pictures. A :class:`SimulatedPipeline` takes the call the engine makes on a diffusers pipeline
(:func:`.generate.call_pipeline`: prompts, steps, one generator per candidate, a step callback,
the size or an edit's init images) and sleeps the configured time instead, one slice per
denoising step with the callback after each, so progress, cancellation and the engine's
measured step time work as on a real model. Many workers with several such models then run on
a few CPU cores (``benchmarks/pool.py``).

Time: ``step_seconds`` gives the seconds per image per denoising step at some batch sizes
(what the engine measures and the pool's backlog estimate reads); a call of ``b`` images and
``s`` steps sleeps ``s x b x`` :func:`step_seconds_at` ``(b)``. Each image is one plain colour
drawn from its prompt and seed, so candidate ``i`` is the same image however it was batched.

Only an operator's models config declares one (:class:`~..models.models_config.SimulatedModel`); the
registry builds it with :func:`load_simulated` and counts its ``resident_bytes`` in the memory
budget (:func:`.residency.pipeline_bytes`), so eviction works as with real weights.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from genloop.sdk.ops import edit_steps

from ..models.models_config import SimulatedModel

StepCallback = Callable[[Any, int, int, dict], dict]


def step_seconds_at(model: SimulatedModel, batch: int) -> float:
    """Seconds per image step at a batch of ``batch``: linear between the two nearest configured
    batch sizes, the nearest one's figure below the smallest or above the largest."""
    points = sorted(model.step_seconds.items())
    if batch <= points[0][0]:
        return points[0][1]
    for (low, at_low), (high, at_high) in zip(points, points[1:], strict=False):
        if batch <= high:
            return at_low + (at_high - at_low) * (batch - low) / (high - low)
    return points[-1][1]


def load_simulated(model: SimulatedModel) -> SimulatedPipeline:
    """Sleep the model's load time (a load is where a pool loses time), then hand it over."""
    time.sleep(model.load_seconds)
    return SimulatedPipeline(model)


@dataclass
class SimulatedOutput:
    """What a diffusers pipeline call returns, as far as the engine reads it."""

    images: list[Image.Image]


class SimulatedPipeline:
    """Takes a diffusers text-to-image, img2img or inpainting call; sleeps instead of computing."""

    #: The engine runs edits on this pipeline itself (no diffusers ``from_pipe``).
    edits_itself = True

    def __init__(self, model: SimulatedModel) -> None:
        self.model = model
        #: Read by :func:`.residency.pipeline_bytes`: it has no weights to count.
        self.resident_bytes = model.resident_bytes

    def to(self, *_device_or_dtype: Any) -> SimulatedPipeline:
        return self

    def set_progress_bar_config(self, **_options: Any) -> None:
        """Nothing to show: a diffusers pipeline's progress bar setting."""

    def __call__(self, *, prompt: Sequence[str], num_inference_steps: int,
                 generator: Sequence[Any], negative_prompt: Sequence[str] | None = None,
                 guidance_scale: float = 7.5, output_type: str = "pil",
                 callback_on_step_end: StepCallback | None = None, width: int | None = None,
                 height: int | None = None, image: Sequence[Image.Image] | None = None,
                 strength: float = 1.0, mask_image: Sequence[Any] | None = None,
                 ) -> SimulatedOutput:
        if output_type != "pil":
            raise ValueError("a simulated model returns PIL images only (output_type='pil')")
        if len(generator) != len(prompt):
            raise ValueError("a simulated model takes one generator per prompt")
        batch = len(prompt)
        steps = num_inference_steps if image is None else edit_steps(num_inference_steps,
                                                                     strength)
        if image is not None:
            size = image[0].size
        elif width and height:
            size = (width, height)
        else:
            raise ValueError("a simulated text-to-image call needs width and height")
        per_step = batch * step_seconds_at(self.model, batch)
        for step in range(steps):
            time.sleep(per_step)
            if callback_on_step_end is not None:
                callback_on_step_end(self, step, num_inference_steps - step, {})
        return SimulatedOutput([_plain(p, g.initial_seed(), size)
                                for p, g in zip(prompt, generator, strict=True)])


def _plain(prompt: str, seed: int, size: tuple[int, int]) -> Image.Image:
    rgb = hashlib.sha256(f"{prompt}\0{seed}".encode()).digest()[:3]
    return Image.new("RGB", size, tuple(rgb))
