"""Switch a diffusers UNet (or VAE) to the Triton kernels, and back, per request.

* Attention: :func:`apply_int8_attention` wraps every attention processor that is exactly
  ``AttnProcessor2_0`` (UNets), ``JointAttnProcessor2_0`` (SD3) or ``FluxAttnProcessor`` (Flux)
  in :class:`~genloop.kernels.sdpa_to_int8.Int8AttnProcessor`, which runs that stock processor
  unchanged and sends its SDPA call to INT8 attention where it runs; the wrapped processor is
  what :func:`remove_int8_attention` restores. Modules with other processors (IP-Adapter,
  subclasses, custom ones, the pre-SDPA ``AttnProcessor``) are left alone.
* GroupNorm + SiLU: ``ResnetBlock2D`` calls ``norm1`` / ``norm2`` and then ``nonlinearity``, a
  SiLU it also applies to the time embedding. A diffusers ``ModelHook`` on the GroupNorm computes
  the fused ``silu(group_norm(x))``, and a hook on the SiLU passes that exact output tensor through
  unchanged (identity check, via a weak reference) while applying SiLU to anything else. ``norm2``
  is fused only when the block feeds it straight into SiLU (``time_embedding_norm="default"``);
  with ``"scale_shift"`` the shift sits between them. The pair ``conv_norm_out`` / ``conv_act``
  of UNets and VAEs is fused the same way.

Both paths dispatch per call, so applying them on a CPU model changes nothing numerically: the
kernels stay off on CPU unless ``force=True`` and Triton runs in interpreter mode (tests).
"""

from __future__ import annotations

import logging
import weakref
from typing import cast

import torch
from diffusers.hooks import HookRegistry, ModelHook
from diffusers.models.attention_processor import AttnProcessor2_0, JointAttnProcessor2_0
from diffusers.models.resnet import ResnetBlock2D
from diffusers.models.transformers.transformer_flux import FluxAttnProcessor

from .dispatch import groupnorm_silu_or_torch
from .sdpa_to_int8 import Int8AttnProcessor

logger = logging.getLogger(__name__)

_NORM_HOOK = "genloop.fused_groupnorm_silu"
_ACT_HOOK = "genloop.fused_groupnorm_silu.pass_through"


#: The stock processors whose attention is one SDPA call on (B, H, N, D) that
#: :class:`Int8AttnProcessor` can intercept (exact classes: a subclass may change the math).
#: ``AttnProcessor`` (the pre-SDPA one ``set_default_attn_processor`` installs) computes attention
#: with ``baddbmm`` and softmax, which no SDPA interception sees, so it is left alone.
_INTERCEPTABLE: tuple[type, ...] = (AttnProcessor2_0, JointAttnProcessor2_0, FluxAttnProcessor)


def apply_int8_attention(model: torch.nn.Module, *, force: bool = False) -> int:
    """Give every attention module of ``model`` that runs a stock processor (plain SDPA, SD3's
    joint attention, Flux's) its INT8 counterpart.

    Returns how many modules were switched (already switched ones are not counted again).
    """
    switched = 0
    for name, module in model.named_modules():
        processor = getattr(module, "processor", None)
        if processor is None or not hasattr(module, "set_processor"):
            continue
        if isinstance(processor, Int8AttnProcessor):
            processor.force = force
        elif type(processor) in _INTERCEPTABLE:
            module.set_processor(Int8AttnProcessor(processor, force=force))
            switched += 1
        else:
            logger.debug("%s keeps its %s", name, type(processor).__name__)
    return switched


def remove_int8_attention(model: torch.nn.Module) -> int:
    """Put back the processors :func:`apply_int8_attention` replaced; returns how many."""
    restored = 0
    for module in model.modules():
        processor = getattr(module, "processor", None)
        set_processor = getattr(module, "set_processor", None)
        if isinstance(processor, Int8AttnProcessor) and set_processor is not None:
            set_processor(processor.previous)
            restored += 1
    return restored


class _SiLUPassThroughHook(ModelHook):
    """On a SiLU module: the tensor its paired GroupNorm hook just produced already went through
    SiLU, so return it as is; apply SiLU to anything else (e.g. the time embedding)."""

    def __init__(self) -> None:
        super().__init__()
        self.fused_output: weakref.ref[torch.Tensor] | None = None

    def new_forward(self, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.fused_output is not None and self.fused_output() is x:
            self.fused_output = None
            return x
        # diffusers sets original_forward to None in __init__, so its declared type is None.
        return self.fn_ref.original_forward(x)  # type: ignore[misc]


class _FusedGroupNormSiLUHook(ModelHook):
    """On a GroupNorm module: compute ``silu(group_norm(x))`` and tell the SiLU hook."""

    def __init__(self, silu_hook: _SiLUPassThroughHook, force: bool) -> None:
        super().__init__()
        self.silu_hook = silu_hook
        self.force = force

    def new_forward(self, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        norm = cast(torch.nn.GroupNorm, module)  # registered on GroupNorms only (_fusable_pairs)
        y = groupnorm_silu_or_torch(
            x, norm.num_groups, norm.weight, norm.bias, norm.eps, force=self.force
        )
        self.silu_hook.fused_output = weakref.ref(y)
        return y


def _fusable_pairs(model: torch.nn.Module) -> list[tuple[torch.nn.GroupNorm, torch.nn.SiLU]]:
    pairs = []
    for module in model.modules():
        if isinstance(module, ResnetBlock2D) and isinstance(module.nonlinearity, torch.nn.SiLU):
            pairs.append((module.norm1, module.nonlinearity))
            if module.time_embedding_norm == "default":
                pairs.append((module.norm2, module.nonlinearity))
        norm, act = getattr(module, "conv_norm_out", None), getattr(module, "conv_act", None)
        if isinstance(norm, torch.nn.GroupNorm) and isinstance(act, torch.nn.SiLU):
            pairs.append((norm, act))
    return [(n, a) for n, a in pairs if type(n) is torch.nn.GroupNorm]


def apply_fused_groupnorm_silu(model: torch.nn.Module, *, force: bool = False) -> int:
    """Fuse each GroupNorm that feeds straight into SiLU in ``model``'s ResNet blocks and output
    head. Returns how many GroupNorms were hooked (already hooked ones are not counted again)."""
    hooked = 0
    for norm, act in _fusable_pairs(model):
        act_registry = HookRegistry.check_if_exists_or_initialize(act)
        silu_hook = act_registry.get_hook(_ACT_HOOK)
        if not isinstance(silu_hook, _SiLUPassThroughHook):  # None: not hooked yet
            silu_hook = _SiLUPassThroughHook()
            act_registry.register_hook(silu_hook, _ACT_HOOK)
        norm_registry = HookRegistry.check_if_exists_or_initialize(norm)
        norm_hook = norm_registry.get_hook(_NORM_HOOK)
        if isinstance(norm_hook, _FusedGroupNormSiLUHook):  # hooked already
            norm_hook.force = force
            continue
        norm_registry.register_hook(_FusedGroupNormSiLUHook(silu_hook, force), _NORM_HOOK)
        hooked += 1
    HookRegistry.check_if_exists_or_initialize(model).invalidate_child_registries_cache()
    return hooked


def remove_fused_groupnorm_silu(model: torch.nn.Module) -> int:
    """Remove the hooks :func:`apply_fused_groupnorm_silu` added; returns how many GroupNorms."""
    removed = 0
    for module in model.modules():
        registry = getattr(module, "_diffusers_hook", None)
        if registry is None:
            continue
        if registry.get_hook(_NORM_HOOK) is not None:
            registry.remove_hook(_NORM_HOOK, recurse=False)
            removed += 1
        if registry.get_hook(_ACT_HOOK) is not None:
            registry.remove_hook(_ACT_HOOK, recurse=False)
    HookRegistry.check_if_exists_or_initialize(model).invalidate_child_registries_cache()
    return removed
