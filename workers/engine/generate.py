"""Running a diffusers text-to-image pipeline for a list of (prompt, seed) candidates."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ImageSettings:
    steps: int
    guidance: float
    width: int
    height: int
    negative_prompt: str | None = None


def generate_images(
    pipe,
    prompts: Sequence[str],
    seeds: Sequence[int],
    settings: ImageSettings,
    on_step: Callable[[int, int], None] | None = None,
) -> list:
    """One PIL image per (prompt, seed).

    Each candidate gets its own CPU ``torch.Generator`` seeded with its seed, so candidate i is
    the same image on any device and however candidates are grouped into messages. Candidates
    run one pipeline call each here; ``on_step(done, total)`` is called after every denoising
    step and may raise to stop (cancellation).
    """
    total = len(prompts) * settings.steps
    images = []
    for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        def callback(pipe, step, timestep, kwargs, _base=i * settings.steps):
            if on_step is not None:
                on_step(_base + step + 1, total)
            return kwargs

        out = pipe(
            prompt=prompt,
            negative_prompt=settings.negative_prompt,
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance,
            width=settings.width,
            height=settings.height,
            generator=torch.Generator("cpu").manual_seed(seed),
            output_type="pil",
            callback_on_step_end=callback,
        )
        images.append(out.images[0])
    return images


def png_bytes(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()
