"""Step caching as a per-request setting: which cache a pipeline call runs with.

A request names a cache mode; :func:`prepare_step_cache` sets the resident pipeline up for one
call in that mode (the engine calls it under the model's lock, right before the call), and the
call's step callback reports each finished step with :func:`step_ended` (DeepCache counts steps
on the host, see :mod:`.deepcache`).

=============  ===========================================================================
mode           meaning
=============  ===========================================================================
``default``    :data:`DEFAULT_CACHE`: the architecture's own mode (:mod:`..models.capabilities`):
               ``deepcache`` for UNets (``off`` for calls of fewer than
               :data:`MIN_DEFAULT_DEEPCACHE_STEPS` steps), ``fbcache`` for Flux,
               ``taylorseer`` for SD3, ``off`` (logged once) where none runs
``off``        no caching; exactly the computation of an unhooked pipeline
``deepcache``  DeepCache on the UNet (:mod:`.deepcache`), shallowest branch, interval 2;
               ``deepcache:N`` for interval ``N`` (the first 10% of the steps, at least one,
               and the last step are always full)
``fbcache``    diffusers' First-Block Cache on the transformer (threshold 0.05;
               ``fbcache:T`` for threshold ``T``)
``taylorseer`` diffusers' TaylorSeer cache on the transformer (its default config)
=============  ===========================================================================

The transformer modes are diffusers' own (``enable_cache``, or the ``apply_*`` function it calls
where a transformer lacks it); genloop does not re-implement them, and opens the cache contexts
they need where a pipeline does not (:mod:`.cache_context`). A mode the pipeline's architecture
cannot run is ``Permanent``: retrying would fail the same way.
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

import logging
import math
import weakref
from dataclasses import dataclass

from diffusers.hooks import HookRegistry

from genloop.sdk.errors import Permanent

from ..models.capabilities import MIN_DEFAULT_DEEPCACHE_STEPS, Architecture, architecture_of
from .cache_context import apply_cache_context, cache_context_step_end, reset_cache_context
from .compile import replays_cuda_graphs
from .deepcache import (
    DeepCacheConfig,
    apply_deepcache,
    deepcache_step_end,
    has_deepcache,
    set_deepcache,
    supports_deepcache,
)

log = logging.getLogger(__name__)

DEFAULT_CACHE = "default"
DEFAULT_DEEPCACHE = DeepCacheConfig(interval=2, warmup=1, tail=1, branch="layer")
#: The first 10% of the steps (at least one) are always full: they set the composition.
WARMUP_FRACTION = 0.1
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
    """Resolve ``mode`` for ``pipe`` and a call of ``num_steps``; a mode the pipeline's
    architecture cannot run (:mod:`..models.capabilities`) is ``Permanent``."""
    name, value = parse_cache(mode)
    arch = architecture_of(pipe)
    if name == "default":
        if arch.default_cache == "off":
            _log_uncached(arch, type(pipe).__name__)
        if arch.default_cache == "deepcache" and num_steps < MIN_DEFAULT_DEEPCACHE_STEPS:
            return CachePlan("off")
        return CachePlan(arch.default_cache)
    if not arch.allows(name):
        raise Permanent(f"{arch.refusal(mode)} ({type(pipe).__name__})")
    return CachePlan(name, value)


_logged: set[str] = set()


def _log_uncached(arch: Architecture, pipeline: str) -> None:
    """Say once per pipeline class why ``default`` runs it uncached."""
    if pipeline not in _logged:
        _logged.add(pipeline)
        log.warning("%s (%s) runs without a step cache: %s", pipeline, arch.title,
                    "; ".join(f"{m}: {r}" for m, r in arch.cache_refusals))


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
    if transformer is not None:
        _set_transformer_cache(transformer, plan)
    return plan


def step_ended(pipe, step: int) -> None:
    """Denoising step ``step`` (0-based) of ``pipe``'s running call has ended; call it from the
    pipeline's ``callback_on_step_end``. Without it DeepCache keeps every step full."""
    unet = getattr(pipe, "unet", None)
    if unet is not None and supports_deepcache(unet):
        deepcache_step_end(unet, step)
    transformer = getattr(pipe, "transformer", None)
    if transformer is not None:
        cache_context_step_end(transformer)


def transformer_cache_config(plan: CachePlan):
    """The diffusers cache config for a transformer plan (``None`` for ``off``)."""
    from diffusers.hooks import FirstBlockCacheConfig, TaylorSeerCacheConfig

    if plan.kind == "fbcache":
        threshold = DEFAULT_FBCACHE_THRESHOLD if plan.value is None else plan.value
        return FirstBlockCacheConfig(threshold=threshold)
    if plan.kind == "taylorseer":
        return TaylorSeerCacheConfig()
    return None


#: The config applied to a transformer without ``enable_cache`` (SD3), by transformer.
_applied: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _set_transformer_cache(transformer, plan: CachePlan) -> None:
    config = transformer_cache_config(plan)
    mixin = hasattr(transformer, "enable_cache")
    current = getattr(transformer, "_cache_config", None) if mixin else _applied.get(transformer)
    if current is not None and current == config:
        reset_cache_context(transformer)
        HookRegistry.check_if_exists_or_initialize(transformer).reset_stateful_hooks()
        return
    if current is not None:
        if mixin:
            transformer.disable_cache()
        else:
            _remove_taylorseer(transformer)
    if config is None:
        return
    apply_cache_context(transformer)
    reset_cache_context(transformer)
    if mixin:
        transformer.enable_cache(config)
    else:  # only TaylorSeer runs here (the capability map refused the rest)
        from diffusers.hooks import apply_taylorseer_cache

        apply_taylorseer_cache(transformer, config)
        # enable_cache does this too: the hooks just added are on submodules.
        HookRegistry.check_if_exists_or_initialize(transformer).invalidate_child_registries_cache()
        _applied[transformer] = config


def _remove_taylorseer(transformer) -> None:
    """Undo ``apply_taylorseer_cache`` (what ``disable_cache`` does for a ``CacheMixin``)."""
    from diffusers.hooks.taylorseer_cache import _TAYLORSEER_CACHE_HOOK

    registry = HookRegistry.check_if_exists_or_initialize(transformer)
    registry.remove_hook(_TAYLORSEER_CACHE_HOOK, recurse=True)
    registry.invalidate_child_registries_cache()
    del _applied[transformer]
