"""Switch a diffusers UNet (or VAE) to the Triton kernels, and back, per request.

* Attention: :class:`Int8AttnProcessor` is ``AttnProcessor2_0`` with the attention call replaced
  by :func:`~genloop.kernels.dispatch.int8_attention_or_sdpa`; SD3's ``JointAttnProcessor2_0``
  and Flux's ``FluxAttnProcessor`` have their counterparts in :mod:`.transformer_processors`.
  :func:`apply_int8_attention` puts the counterpart on every attention module whose processor is
  exactly one of those stock classes and keeps the old processor inside the new one, so
  :func:`remove_int8_attention` restores exactly what was there. Modules with other processors
  (IP-Adapter, subclasses, custom ones) are left alone.
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
from typing import Any

import torch
from diffusers.hooks import HookRegistry, ModelHook
from diffusers.models.attention_processor import (
    Attention,
    AttnProcessor,
    AttnProcessor2_0,
    JointAttnProcessor2_0,
)
from diffusers.models.resnet import ResnetBlock2D
from diffusers.models.transformers.transformer_flux import FluxAttnProcessor

from .dispatch import groupnorm_silu_or_torch, int8_attention_or_sdpa
from .transformer_processors import Int8FluxAttnProcessor, Int8JointAttnProcessor

logger = logging.getLogger(__name__)

_NORM_HOOK = "genloop.fused_groupnorm_silu"
_ACT_HOOK = "genloop.fused_groupnorm_silu.pass_through"


class Int8AttnProcessor:
    """Attention processor for diffusers ``Attention``: INT8 attention where it runs, else SDPA.

    ``previous`` is the processor it replaced (restored by :func:`remove_int8_attention`).
    """

    def __init__(self, previous: Any = None, *, force: bool = False) -> None:
        self.previous = previous
        self.force = force

    def __call__(
        self, attn: Attention, hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None, temb: torch.Tensor | None = None,
    ) -> torch.Tensor:
        residual = hidden_states
        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)
        input_ndim = hidden_states.ndim
        if input_ndim == 4:
            batch_size, channel, height, width = hidden_states.shape
            hidden_states = hidden_states.view(batch_size, channel, height * width).transpose(1, 2)
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        batch_size, sequence_length, _ = context.shape
        if attention_mask is not None:
            attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length,
                                                         batch_size)
            attention_mask = attention_mask.view(batch_size, attn.heads, -1,
                                                 attention_mask.shape[-1])
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)

        query = attn.to_q(hidden_states)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        elif attn.norm_cross:
            encoder_hidden_states = attn.norm_encoder_hidden_states(encoder_hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        head_dim = key.shape[-1] // attn.heads
        # (B, N, H*D) viewed as (B, H, N, D) without a copy: the kernel takes strided inputs.
        query = query.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        # attn.scale is dim_head**-0.5 unless the model set scale_qk=False; AttnProcessor2_0
        # ignores it and always uses 1/sqrt(D), the same number in every stock config.
        hidden_states = int8_attention_or_sdpa(
            query, key, value, sm_scale=attn.scale, attn_mask=attention_mask, force=self.force
        )
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim)
        hidden_states = hidden_states.to(query.dtype)
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        if input_ndim == 4:
            hidden_states = hidden_states.transpose(-1, -2).reshape(batch_size, channel, height,
                                                                    width)
        if attn.residual_connection:
            hidden_states = hidden_states + residual
        return hidden_states / attn.rescale_output_factor


#: Stock processor class -> its INT8 counterpart (exact classes: a subclass may change the math).
_COUNTERPARTS: dict[type, type] = {
    AttnProcessor: Int8AttnProcessor,
    AttnProcessor2_0: Int8AttnProcessor,
    JointAttnProcessor2_0: Int8JointAttnProcessor,
    FluxAttnProcessor: Int8FluxAttnProcessor,
}
_INT8_PROCESSORS = (Int8AttnProcessor, Int8JointAttnProcessor, Int8FluxAttnProcessor)


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
        if isinstance(processor, _INT8_PROCESSORS):
            processor.force = force
        elif type(processor) in _COUNTERPARTS:
            module.set_processor(_COUNTERPARTS[type(processor)](processor, force=force))
            switched += 1
        else:
            logger.debug("%s keeps its %s", name, type(processor).__name__)
    return switched


def remove_int8_attention(model: torch.nn.Module) -> int:
    """Put back the processors :func:`apply_int8_attention` replaced; returns how many."""
    restored = 0
    for module in model.modules():
        if isinstance(getattr(module, "processor", None), _INT8_PROCESSORS):
            module.set_processor(module.processor.previous)
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
        return self.fn_ref.original_forward(x)


class _FusedGroupNormSiLUHook(ModelHook):
    """On a GroupNorm module: compute ``silu(group_norm(x))`` and tell the SiLU hook."""

    def __init__(self, silu_hook: _SiLUPassThroughHook, force: bool) -> None:
        super().__init__()
        self.silu_hook = silu_hook
        self.force = force

    def new_forward(self, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        y = groupnorm_silu_or_torch(
            x, module.num_groups, module.weight, module.bias, module.eps, force=self.force
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
        if silu_hook is None:
            silu_hook = _SiLUPassThroughHook()
            act_registry.register_hook(silu_hook, _ACT_HOOK)
        norm_registry = HookRegistry.check_if_exists_or_initialize(norm)
        norm_hook = norm_registry.get_hook(_NORM_HOOK)
        if norm_hook is not None:
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
