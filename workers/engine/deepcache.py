"""DeepCache for diffusers UNets, as diffusers ``ModelHook``s.

DeepCache (Ma et al., 2023) observes that a UNet's deep features change slowly across
neighbouring denoising steps while the shallow skip branch carries the fine detail. On a *full*
step the UNet runs as usual and every deep block's output is kept; on a *cached* step only
``conv_in``, the first down block and the last up block run, and the deep blocks hand back what
they returned on the last full step. In a ``UNet2DConditionModel`` the last up block reads its
skip connections from ``conv_in`` and the first down block only, so those stay fresh.

Hooks, not monkeypatching: a stateful :class:`_StepHook` on the UNet decides per call whether the
step is full, and a :class:`_DeepBlockHook` on each deep block (``down_blocks[1:]``,
``mid_block``, ``up_blocks[:-1]``) replays or records; with ``branch="layer"`` (the default, the
paper's shallowest branch) hooks on the outer level replay too, and a cached step runs only
``conv_in`` and the last layer of the last up block. With the config's ``interval`` at 1 (or
:func:`set_deepcache` given ``None``) every call goes straight to the original ``forward``, so
"off" computes exactly what an unhooked UNet computes.

Which step a UNet call belongs to is counted on the host: the pipeline's step callback reports
each finished step (:func:`deepcache_step_end`; :func:`~.generate.call_pipeline` does it), and
every UNet call until the next report belongs to the same step, however many calls a step makes
(one with batched guidance, two with separate cond/uncond passes). Nothing reads the timestep
tensor, so a UNet call queues its kernels without waiting for the GPU. A pipeline run without
the callback stays at step 0, which is always full: correct, and no saving.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from diffusers.hooks import HookRegistry, ModelHook

_STEP_HOOK = "genloop.deepcache.step"
_BLOCK_HOOK = "genloop.deepcache.block"


@dataclass(frozen=True)
class DeepCacheConfig:
    """Uniform DeepCache schedule, and which branch stays fresh on cached steps.

    ``branch="block"``: the first down block and the last up block run on cached steps.
    ``branch="layer"`` (DeepCache's shallowest skip branch): only ``conv_in`` and the last layer
    of the last up block (resnet, attention) run; the rest of that block and the whole first
    down block are replayed too. Much cheaper on UNets whose outer level dominates the cost
    (small two-level UNets), and a little further from the uncached result.

    Step ``i`` (0-based) of ``n`` is full when ``i % interval == 0``, when ``i < warmup`` (the
    first steps set the composition), or when ``i >= n - tail`` (the last steps shape fine
    detail); otherwise it is cached.
    ``interval=1`` means every step is full (exactly off).
    """

    interval: int = 3
    warmup: int = 1
    tail: int = 1
    branch: str = "layer"

    def __post_init__(self) -> None:
        if self.branch not in ("layer", "block"):
            raise ValueError(f"DeepCache branch is 'layer' or 'block', not {self.branch!r}")
        if self.interval < 1 or self.warmup < 0 or self.tail < 0:
            raise ValueError(
                f"invalid DeepCache schedule {self!r}: interval >= 1, warmup/tail >= 0")

    def is_full(self, step: int, num_steps: int | None) -> bool:
        if self.interval == 1 or step < self.warmup or step % self.interval == 0:
            return True
        return num_steps is not None and step >= num_steps - self.tail


class _State:
    """Shared by the hooks of one UNet: where the denoising loop is, and the kept features."""

    def __init__(self) -> None:
        self.config: DeepCacheConfig | None = None
        self.num_steps: int | None = None
        #: Keep copies of the blocks' outputs (see :func:`_copy`): only a UNet replaying CUDA
        #: graphs needs them; an eager block returns fresh tensors on every call.
        self.copy_outputs = False
        self.reset()

    def reset(self) -> None:
        self.step = 0
        self.full = True
        self.batch: int | None = None
        self.kept: dict[int, Any] = {}
        self.full_steps = 0
        self.cached_steps = 0


class _StepHook(ModelHook):
    _is_stateful = True

    def __init__(self, state: _State) -> None:
        super().__init__()
        self.state = state

    def pre_forward(self, module, *args, **kwargs):
        s = self.state
        if s.config is None:
            return args, kwargs
        sample = args[0] if args else kwargs["sample"]
        # Kept features are only valid for the same batch; anything else computes fully.
        s.full = (s.config.is_full(s.step, s.num_steps) or s.batch != sample.shape[0]
                  or not s.kept)
        if s.full:
            s.batch = sample.shape[0]
            s.full_steps += 1
        else:
            s.cached_steps += 1
        return args, kwargs

    def reset_state(self, module):
        self.state.reset()
        return module


class _DeepBlockHook(ModelHook):
    """Replays, on cached steps, what its module returned on the last full step.

    ``outer`` hooks sit on the outer level (first down block, all but the last layer of the
    last up block) and act only with ``branch="layer"``.
    """

    def __init__(self, state: _State, slot: int, outer: bool = False) -> None:
        super().__init__()
        self.state = state
        self.slot = slot
        self.outer = outer

    def new_forward(self, module, *args, **kwargs):
        s = self.state
        if s.config is None or (self.outer and s.config.branch != "layer"):
            return self.fn_ref.original_forward(*args, **kwargs)
        if not s.full and self.slot in s.kept:
            return s.kept[self.slot]
        out = self.fn_ref.original_forward(*args, **kwargs)
        s.kept[self.slot] = _copy(out) if s.copy_outputs else out
        return out


def _copy(value: Any) -> Any:
    """A copy of a block's output to keep across steps. The block's own tensors may live in
    buffers that are written again before the next step reads them: CUDA graphs
    (``torch.compile(mode="reduce-overhead")``) replay into the same output memory on every
    call. Eager runs keep the outputs themselves: nothing writes them again."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return type(value)(_copy(v) for v in value)
    return value


def _deep_blocks(unet) -> list[torch.nn.Module]:
    blocks = list(unet.down_blocks)[1:]
    if unet.mid_block is not None:
        blocks.append(unet.mid_block)
    return blocks + list(unet.up_blocks)[:-1]


def _outer_layers(unet) -> list[torch.nn.Module]:
    """The first down block, and every layer of the last up block but its last one: the last
    layer reads its skip connection from ``conv_in``, which always runs."""
    last = unet.up_blocks[-1]
    layers = [unet.down_blocks[0], *list(last.resnets)[:-1]]
    attentions = getattr(last, "attentions", None)
    if attentions is not None:
        layers += list(attentions)[:-1]
    return layers


def supports_deepcache(model) -> bool:
    """Whether ``model`` has the down/mid/up layout DeepCache needs (a diffusers 2D UNet)."""
    return (hasattr(model, "down_blocks") and hasattr(model, "up_blocks")
            and len(model.down_blocks) >= 2 and len(model.up_blocks) >= 2)


def apply_deepcache(unet) -> None:
    """Install the (inactive) hooks on ``unet``; idempotent. Activate with :func:`set_deepcache`."""
    if not supports_deepcache(unet):
        raise TypeError(f"DeepCache needs a UNet with down/up blocks, not {type(unet).__name__}")
    if has_deepcache(unet):
        return
    registry = HookRegistry.check_if_exists_or_initialize(unet)
    state = _State()
    registry.register_hook(_StepHook(state), _STEP_HOOK)
    deep, outer = _deep_blocks(unet), _outer_layers(unet)
    for slot, block in enumerate(deep + outer):
        HookRegistry.check_if_exists_or_initialize(block).register_hook(
            _DeepBlockHook(state, slot, outer=slot >= len(deep)), _BLOCK_HOOK)
    registry.invalidate_child_registries_cache()


def remove_deepcache(unet) -> None:
    """Remove every hook :func:`apply_deepcache` installed."""
    registry = HookRegistry.check_if_exists_or_initialize(unet)
    registry.remove_hook(_STEP_HOOK, recurse=False)
    registry.remove_hook(_BLOCK_HOOK, recurse=True)
    registry.invalidate_child_registries_cache()


def set_deepcache(unet, config: DeepCacheConfig | None, num_steps: int | None = None, *,
                  copy_outputs: bool = False) -> None:
    """Start a denoising run with ``config`` (``None``: off) and forget the kept features.

    Call it before each pipeline call; ``num_steps`` lets the schedule keep the last steps full.
    ``copy_outputs``: the UNet replays CUDA graphs, whose next replay writes over the outputs
    kept (:func:`~.compile.replays_cuda_graphs` says).
    """
    state = _state(unet)
    state.config = None if config is None or config.interval == 1 else config
    state.num_steps = num_steps
    state.copy_outputs = copy_outputs
    state.reset()


def deepcache_step_end(unet, step: int) -> None:
    """Denoising step ``step`` (0-based) has ended: later UNet calls belong to step ``step + 1``.

    Call it from the pipeline's ``callback_on_step_end`` (its ``step`` argument is a host int);
    a no-op where the hooks are not installed. Setting the step, rather than adding one, keeps
    the count right even if a report were missed or repeated.
    """
    hook = _step_hook(unet)
    if hook is not None:
        hook.state.step = step + 1


def deepcache_stats(unet) -> tuple[int, int]:
    """(full, cached) UNet calls since the last :func:`set_deepcache`."""
    state = _state(unet)
    return state.full_steps, state.cached_steps


def has_deepcache(unet) -> bool:
    """Whether :func:`apply_deepcache` has installed its hooks on ``unet``."""
    return _step_hook(unet) is not None


def _step_hook(unet) -> _StepHook | None:
    hook = HookRegistry.check_if_exists_or_initialize(unet).get_hook(_STEP_HOOK)
    return hook if isinstance(hook, _StepHook) else None


def _state(unet) -> _State:
    hook = _step_hook(unet)
    if hook is None:
        raise RuntimeError("DeepCache hooks are not installed; call apply_deepcache(unet) first")
    return hook.state
