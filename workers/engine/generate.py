"""One diffusers text-to-image call for a batch of (prompt, seed) candidates.

Every candidate gets its own CPU ``torch.Generator`` seeded with its seed, passed to diffusers as
a list: the pipeline draws candidate ``i``'s initial latents and any per-step noise from
generator ``i`` alone, so a candidate's random numbers do not depend on which other candidates
share its call, nor on the device. What can still differ between a batched and an unbatched call
is float rounding: on CPU, oneDNN picks convolution kernels by batch size, which moves outputs
by ~1e-6 (PSNR > 100 dB, an 8-bit pixel flips now and then). Calls with one candidate each are
bitwise reproducible.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import edit_steps

from .resume import Joiner, initial_noise_sigma, join, started_at
from .step_cache import DEFAULT_CACHE, step_ended


@dataclass(frozen=True)
class ImageSettings:
    """What a call shares across its candidates. ``cache``: see :mod:`.step_cache`.

    ``kind`` and ``strength`` belong to edits: an edit starts from its init image noised to
    ``strength`` (1 = all noise) and runs ``int(steps * strength)`` denoising steps, at least
    one (diffusers fails a call that would run none: its strength is raised to one step's).
    """

    steps: int
    guidance: float
    width: int
    height: int
    negative_prompt: str | None = None
    cache: str = DEFAULT_CACHE
    kind: str = "text"
    strength: float = 1.0

    @property
    def denoised_steps(self) -> int:
        """Steps the call runs per image (diffusers' img2img rounds steps x strength down)."""
        if self.kind == "text":
            return self.steps
        return edit_steps(self.steps, self.strength)

    @property
    def edit_strength(self) -> float:
        """The strength handed to diffusers: ``strength``, or one step's where that would
        round to none (1.5 / steps runs exactly one, clear of float rounding)."""
        return self.strength if int(self.steps * self.strength) else min(1.0, 1.5 / self.steps)


def call_pipeline(
    pipe,
    prompts: Sequence[str],
    seeds: Sequence[int],
    settings: ImageSettings,
    negative_prompts: Sequence[str | None] | None = None,
    on_step_end: Callable[[int], None] | None = None,
    init_images: Sequence | None = None,
    masks: Sequence | None = None,
    start: int = 0,
    latents: torch.Tensor | None = None,
    on_latents: Callable[[int, torch.Tensor], None] | None = None,
    joiners: Sequence[Joiner] = (),
) -> list:
    """PIL images for the candidates, in one pipeline call; caching as already prepared (the
    step callback tells the step cache where the call is, :func:`.step_cache.step_ended`).

    ``on_step_end(step)`` runs after denoising step ``step`` of this call (0-based) and may
    raise to stop. Edits (``settings.kind`` img2img or inpaint) need ``pipe`` to be the
    matching pipeline (see :func:`edit_pipeline`), one init image per candidate and, to
    inpaint, one mask each. A text-to-image call may ``start`` after that many steps of the
    schedule, from ``latents`` (the state entering that step, one per candidate: see
    :mod:`.latent_cache`); ``on_latents(done, latents)`` sees the batch's latents after each
    step, ``done`` counted from the schedule's start. ``joiners`` (a pipeline that
    :func:`.resume.joins_midway` only) join the batch at their later start steps; their images
    follow the call's own, in order.
    """
    if negative_prompts is None:
        negative_prompts = [settings.negative_prompt] * len(prompts)
    # diffusers treats a missing negative prompt as ""; a list needs an entry per candidate.
    negatives = [n or "" for n in negative_prompts]

    def callback(_pipe, step, _timestep, kwargs):
        step_ended(pipe, step)
        if on_step_end is not None:
            on_step_end(step)
        done = start + step + 1
        if on_latents is not None and kwargs.get("latents") is not None:
            on_latents(done, kwargs["latents"])
        if step == settings.denoised_steps - start - 1:
            check_finite(kwargs.get("latents"))
        for joiner in joiners:
            if joiner.step == done:
                join(_pipe, kwargs, joiner)
        return kwargs

    extra: dict = {"width": settings.width, "height": settings.height}
    if joiners:
        extra["callback_on_step_end_tensor_inputs"] = ["latents", "prompt_embeds"]
    if start:
        if settings.kind != "text" or latents is None:
            raise ValueError("only a text-to-image call starts part-way, and it needs latents")
        # The pipeline scales the latents it is given by the schedule's initial noise sigma
        # (1 for DDIM, more for Euler); these are already at their step's noise level.
        extra["latents"] = latents / initial_noise_sigma(pipe.scheduler, settings.steps)
    if settings.kind != "text":
        if init_images is None or len(init_images) != len(prompts):
            raise ValueError("an edit needs one init image per candidate")
        extra = {"image": list(init_images), "strength": settings.edit_strength}
        if takes_size(pipe):
            # Flux's img2img draws its own default size (not the init image's) unless told.
            extra.update(width=settings.width, height=settings.height)
        if settings.kind == "inpaint":
            if masks is None or len(masks) != len(prompts):
                raise ValueError("inpainting needs one mask per candidate")
            extra.update(mask_image=list(masks))
    with started_at(pipe.scheduler, start) if start else nullcontext():
        out = pipe(
            prompt=list(prompts),
            negative_prompt=negatives if any(negatives) else None,
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance,
            generator=[torch.Generator("cpu").manual_seed(s) for s in seeds],
            output_type="pil",
            callback_on_step_end=callback,
            **extra,
        )
    return list(out.images)


def takes_size(pipe) -> bool:
    """Whether ``pipe``'s call takes ``width`` and ``height`` (SD's and SDXL's img2img take the
    init image's size instead)."""
    return "width" in inspect.signature(type(pipe).__call__).parameters


def edit_pipeline(pipe, kind: str):
    """The img2img or inpainting pipeline over ``pipe``'s own components (diffusers'
    ``from_pipe``: the weights are shared, not copied); ``pipe`` itself for ``text``, or when
    it takes edits itself (``edits_itself``: :mod:`.simulated`)."""
    if kind == "text" or getattr(pipe, "edits_itself", False):
        return pipe
    from diffusers import AutoPipelineForImage2Image, AutoPipelineForInpainting

    auto = AutoPipelineForImage2Image if kind == "img2img" else AutoPipelineForInpainting
    try:
        derived = auto.from_pipe(pipe)
    except ValueError as exc:
        raise ValueError(f"{type(pipe).__name__} has no {kind} counterpart: {exc}") from exc
    derived.set_progress_bar_config(disable=True)
    return derived


def check_finite(latents) -> None:
    """Refuse latents with NaN/inf (fp16 overflow, broken weights): they decode to black images
    that would be stored as results. Checked once, after the last step, since the check waits
    for the GPU; the VAE decode that follows waits anyway."""
    if latents is not None and not bool(torch.isfinite(latents).all()):
        raise Permanent(
            "the denoised latents contain NaN or inf (float16 overflow or broken weights); "
            "the images would be blank. Try dtype=torch.bfloat16 or float32 for this model")


def generate_images(
    pipe,
    prompts: Sequence[str],
    seeds: Sequence[int],
    settings: ImageSettings,
    on_step: Callable[[int, int], None] | None = None,
) -> list:
    """One pipeline call per candidate, no batching and no caching: the reference path.

    ``on_step(done, total)`` is called after every denoising step and may raise to stop.
    """
    from .step_cache import prepare_step_cache

    total = len(prompts) * settings.steps
    images = []
    for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
        prepare_step_cache(pipe, "off", settings.steps)

        def step_end(step: int, _base: int = i * settings.steps) -> None:
            if on_step is not None:
                on_step(_base + step + 1, total)

        images += call_pipeline(pipe, [prompt], [seed], settings, on_step_end=step_end)
    return images


def png_bytes(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()
