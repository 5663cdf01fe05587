"""Denoising that starts part-way through the schedule, from stored latents (what
:mod:`.latent_cache` hands back), and batches whose candidates start at different steps.

Diffusers starts part-way only from an image it re-noises (img2img's ``strength``), never from
latents already at a step's noise level, and a pipeline call runs one batch from one step to the
end. Both are done here by hand, through the pipeline's own seams: the schedule its scheduler
sets is cut (:func:`started_at`), and on a Stable Diffusion pipeline the step callback, which may
replace the loop's latents and prompt embeddings, adds the candidates that start later to the
running batch at their step (:func:`join`), so a batch of mixed starts is one call, each
candidate denoised only from its own start.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Joiner:
    """Candidates that join a running batch after ``step`` steps, from ``latents`` (the state
    entering that step, one row each)."""

    step: int
    latents: torch.Tensor
    prompts: Sequence[str]
    negative_prompts: Sequence[str]


def joins_midway(pipe) -> bool:
    """Whether candidates can join ``pipe``'s running batch (:func:`join`): a Stable Diffusion
    text-to-image pipeline whose loop holds nothing else per candidate (no guidance-scale
    embedding). Others run each start step as a call of its own."""
    from diffusers import StableDiffusionPipeline

    unet = getattr(pipe, "unet", None)
    return (type(pipe) is StableDiffusionPipeline and unet is not None
            and unet.config.time_cond_proj_dim is None)


def calls_by_start(starts: Sequence[int], joins: bool) -> list[list[tuple[int, list[int]]]]:
    """The pipeline calls for candidates starting after ``starts[i]`` steps: each a list of
    ``(start step, candidate indices)``, earliest first. Where later starts can ``join`` the
    running batch that is one call; else one call per start step."""
    groups: dict[int, list[int]] = {}
    for i, start in enumerate(starts):
        groups.setdefault(start, []).append(i)
    ordered = sorted(groups.items())
    return [ordered] if joins else [[group] for group in ordered]


def join(pipe, kwargs: dict, joiner: Joiner) -> None:
    """Add ``joiner``'s candidates to the loop state a step callback holds (``kwargs``, with
    ``latents`` and ``prompt_embeds``): latents after the batch's, embeddings after each half's
    (with classifier-free guidance the loop's embeddings are the unconditional half, then the
    conditional one)."""
    latents = kwargs["latents"]
    embeds = kwargs["prompt_embeds"]
    guided = pipe.do_classifier_free_guidance
    positive, negative = pipe.encode_prompt(
        list(joiner.prompts), latents.device, 1, guided,
        negative_prompt=list(joiner.negative_prompts) if guided else None)
    kwargs["latents"] = torch.cat([latents, joiner.latents.to(latents)])
    positive = positive.to(embeds)
    if guided:
        old_negative, old_positive = embeds.chunk(2)
        kwargs["prompt_embeds"] = torch.cat(
            [old_negative, negative.to(embeds), old_positive, positive])
    else:
        kwargs["prompt_embeds"] = torch.cat([embeds, positive])


@contextmanager
def started_at(scheduler, start: int) -> Iterator[None]:
    """While open, the schedules ``scheduler`` sets skip their first ``start`` steps.

    A pipeline denoises over what ``scheduler.set_timesteps`` leaves in ``timesteps``, so the
    tail of the usual schedule is set there; schedulers that keep a step index (Euler, DPM,
    flow matching) are told where the tail begins (``set_begin_index``), as diffusers' own
    img2img pipelines do.
    """
    own = scheduler.set_timesteps

    @functools.wraps(own)  # pipelines read its signature (Flux's passes sigmas when it may)
    def set_timesteps(*args, **kwargs):
        own(*args, **kwargs)
        skip = start * scheduler.order
        scheduler.timesteps = scheduler.timesteps[skip:]
        if hasattr(scheduler, "set_begin_index"):
            scheduler.set_begin_index(skip)

    scheduler.set_timesteps = set_timesteps
    try:
        yield
    finally:
        del scheduler.set_timesteps


def initial_noise_sigma(scheduler, steps: int) -> float:
    """The factor a pipeline multiplies given latents by, for a ``steps``-step schedule (1 for
    flow matching, whose schedulers have none: SD3's and Flux's pipelines scale nothing)."""
    probe = copy.deepcopy(scheduler)
    probe.set_timesteps(steps)
    return float(getattr(probe, "init_noise_sigma", 1.0))
