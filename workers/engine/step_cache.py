"""Step caching as a per-request setting: which cache a pipeline call runs with.

A request names a cache mode; :func:`prepare_step_cache` sets the resident pipeline up for one
call in that mode (the engine calls it under the model's lock, right before the call), and the
call's step callback reports each finished step with :func:`step_ended` (DeepCache counts steps
on the host, see :mod:`.deepcache`).

=============  ===========================================================================
mode           meaning
=============  ===========================================================================
``default``    :data:`DEFAULT_CACHE`: ``deepcache`` for UNet pipelines (``off`` for calls
               of fewer than :data:`MIN_DEFAULT_DEEPCACHE_STEPS` steps), ``fbcache`` for
               transformer pipelines, ``off`` for anything else
``off``        no caching; exactly the computation of an unhooked pipeline
``deepcache``  DeepCache on the UNet (:mod:`.deepcache`), shallowest branch, interval 2;
               ``deepcache:N`` for interval ``N`` (the first 10% of the steps, at least one,
               and the last step are always full)
``fbcache``    diffusers' First-Block Cache on the transformer (threshold 0.05;
               ``fbcache:T`` for threshold ``T``)
``taylorseer`` diffusers' TaylorSeer cache on the transformer (its default config)
=============  ===========================================================================

The transformer modes use diffusers' own ``enable_cache``; genloop does not re-implement them.
Why interval 2 by default: on the trained shapes model (20 DDIM steps, 32 held-out prompts)
interval 2 kept every image at PSNR >= 30.8 dB against ``off`` (median 47 dB), while interval 3
dropped 1-3 of 32 images below 30 dB (min 16 dB: the trajectory settled on a slightly different
picture); the first 10% of steps kept full raise the 10th percentile from 35 to 40 dB. On tiny
(random weights) interval 2 costs ~50 dB and takes 1.3x (4 steps) to 1.5x (20 steps) off the
denoising time. CLIP scores move < 1%. The DeepCache paper reports 2.3x on SD1.5 for -0.05 CLIP
at longer intervals and 50 steps; ``deepcache:3`` and up trade quality for that speed per request.
Figures: ``benchmarks/generation.py``. Use ``off`` where a bit-exact result matters.
Why not below 8 steps by default: a short call (a ``draft`` refiner's 4-step drafts, a 6-step
img2img finish) has few steps between its full first and last ones, and each carries more of
the picture. On the shapes model (32 images, ``benchmarks/generation.py --steps N``) DeepCache
at 8 steps was 1.69x diffusers' batched call at PSNR >= 39 dB (median 45), at 4 steps 1.12x at
median 37 dB (min 31) and CLIP score -1.6%: too little speed for the drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .compile import replays_cuda_graphs
from .deepcache import (
    DeepCacheConfig,
    apply_deepcache,
    deepcache_step_end,
    has_deepcache,
    set_deepcache,
    supports_deepcache,
)

DEFAULT_CACHE = "default"
DEFAULT_DEEPCACHE = DeepCacheConfig(interval=2, warmup=1, tail=1, branch="layer")
#: The first 10% of the steps (at least one) are always full: they set the composition.
WARMUP_FRACTION = 0.1
#: ``default`` runs calls of fewer denoising steps than this without DeepCache.
MIN_DEFAULT_DEEPCACHE_STEPS = 8
DEFAULT_FBCACHE_THRESHOLD = 0.05
MODES = ("default", "off", "deepcache", "fbcache", "taylorseer")


@dataclass(frozen=True)
class CachePlan:
    """What a cache mode means for one pipeline: ``kind`` and its parameter."""

    kind: str  # "off" | "deepcache" | "fbcache" | "taylorseer"
    value: float | None = None


def parse_cache(mode: str) -> tuple[str, float | None]:
    """Split ``"deepcache:2"`` into ``("deepcache", 2.0)``; raise ``ValueError`` on a bad mode."""
    name, _, arg = mode.partition(":")
    if name not in MODES:
        raise ValueError(f"unknown cache mode {mode!r}; use one of {', '.join(MODES)}")
    if not arg:
        return name, None
    if name not in ("deepcache", "fbcache"):
        raise ValueError(f"cache mode {name!r} takes no parameter (got {mode!r})")
    try:
        value = float(arg)
    except ValueError:
        raise ValueError(f"cache mode {mode!r}: {arg!r} is not a number") from None
    if name == "deepcache" and (value < 1 or value != int(value)):
        raise ValueError(f"cache mode {mode!r}: the DeepCache interval is a whole number >= 1")
    return name, value


def plan_for(pipe, mode: str, num_steps: int) -> CachePlan:
    """Resolve ``mode`` for ``pipe`` and a call of ``num_steps``; a mode the pipeline's denoiser
    cannot run is an error."""
    name, value = parse_cache(mode)
    unet, transformer = getattr(pipe, "unet", None), getattr(pipe, "transformer", None)
    if name == "default":
        if unet is not None and supports_deepcache(unet):
            if num_steps < MIN_DEFAULT_DEEPCACHE_STEPS:
                return CachePlan("off")
            return CachePlan("deepcache", None)
        if transformer is not None and hasattr(transformer, "enable_cache"):
            return CachePlan("fbcache", None)
        return CachePlan("off")
    if name == "deepcache" and (unet is None or not supports_deepcache(unet)):
        raise ValueError(f"cache mode {mode!r} needs a UNet pipeline, not {type(pipe).__name__}")
    if name in ("fbcache", "taylorseer") and not hasattr(transformer, "enable_cache"):
        raise ValueError(f"cache mode {mode!r} needs a transformer pipeline whose transformer "
                         f"supports diffusers' enable_cache, not {type(pipe).__name__}")
    return CachePlan(name, value)


def prepare_step_cache(pipe, mode: str, num_steps: int) -> CachePlan:
    """Set ``pipe`` up to run its next call with cache ``mode``; returns the resolved plan."""
    plan = plan_for(pipe, mode, num_steps)
    unet = getattr(pipe, "unet", None)
    if unet is not None and supports_deepcache(unet):
        config = None
        if plan.kind == "deepcache":
            interval = DEFAULT_DEEPCACHE.interval if plan.value is None else int(plan.value)
            warmup = max(DEFAULT_DEEPCACHE.warmup, math.ceil(WARMUP_FRACTION * num_steps))
            config = DeepCacheConfig(interval, warmup, DEFAULT_DEEPCACHE.tail,
                                     DEFAULT_DEEPCACHE.branch)
        if config is not None:
            apply_deepcache(unet)
        if config is not None or has_deepcache(unet):
            set_deepcache(unet, config, num_steps, copy_outputs=replays_cuda_graphs(unet))
    transformer = getattr(pipe, "transformer", None)
    if transformer is not None and hasattr(transformer, "enable_cache"):
        _set_transformer_cache(transformer, plan)
    return plan


def step_ended(pipe, step: int) -> None:
    """Denoising step ``step`` (0-based) of ``pipe``'s running call has ended; call it from the
    pipeline's ``callback_on_step_end``. Without it DeepCache keeps every step full."""
    unet = getattr(pipe, "unet", None)
    if unet is not None and supports_deepcache(unet):
        deepcache_step_end(unet, step)


def transformer_cache_config(plan: CachePlan):
    """The diffusers cache config for a transformer plan (``None`` for ``off``)."""
    from diffusers.hooks import FirstBlockCacheConfig, TaylorSeerCacheConfig

    if plan.kind == "fbcache":
        threshold = DEFAULT_FBCACHE_THRESHOLD if plan.value is None else plan.value
        return FirstBlockCacheConfig(threshold=threshold)
    if plan.kind == "taylorseer":
        return TaylorSeerCacheConfig()
    return None


def _set_transformer_cache(transformer, plan: CachePlan) -> None:
    config = transformer_cache_config(plan)
    current = getattr(transformer, "_cache_config", None)
    if current is not None and current == config:
        transformer._reset_stateful_cache()
        return
    if current is not None:
        transformer.disable_cache()
    if config is not None:
        transformer.enable_cache(config)
