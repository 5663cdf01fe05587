"""INT8 attention for diffusion transformers: SD3's joint attention and Flux's attention.

diffusers builds these processors around one attention call, inline in ``__call__``, with no
seam to swap it: ``JointAttnProcessor2_0`` (SD3, SD3.5; ``Attention`` modules) calls
``F.scaled_dot_product_attention`` on (B, H, N, D), and ``FluxAttnProcessor`` (Flux;
``FluxAttention`` modules) calls diffusers' ``dispatch_attention_fn`` on (B, N, H, D) with its
configured backend. Each class below is the stock ``__call__`` of diffusers 0.42 with only that
call replaced (diffusers itself writes one processor per variant the same way), so the text
around it must follow diffusers when diffusers changes it: tests/kernels/test_transformer_
processors.py compares each against the stock processor on a tiny model.

Where dispatch declines (:func:`~genloop.kernels.dispatch.int8_attention_blocker`), the stock
call runs with the stock arguments: SDPA with its default scale for SD3, and Flux's
``dispatch_attention_fn`` with the processor's backend, so "declined" computes exactly what the
stock processor computes. Joint attention concatenates text and image tokens, so the key count
is image + text tokens (4096 + 333 for SD3 at 1024 px).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.embeddings import apply_rotary_emb
from diffusers.models.transformers.transformer_flux import _get_qkv_projections

from . import dispatch
from .dispatch import int8_attention_or_sdpa

logger = logging.getLogger(__name__)


class Int8JointAttnProcessor:
    """``JointAttnProcessor2_0`` (SD3) with INT8 attention where it runs, else the same SDPA.

    ``previous`` is the processor it replaced (restored by ``remove_int8_attention``).
    """

    def __init__(self, previous: Any = None, *, force: bool = False) -> None:
        self.previous = previous
        self.force = force

    def __call__(self, attn, hidden_states: torch.Tensor,
                 encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, *args, **kwargs) -> Any:
        residual = hidden_states
        batch_size = hidden_states.shape[0]
        query, key, value = attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(
            hidden_states)
        head_dim = key.shape[-1] // attn.heads
        query, key, value = (t.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
                             for t in (query, key, value))
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        if encoder_hidden_states is not None:
            context_q, context_k, context_v = (
                proj(encoder_hidden_states).view(batch_size, -1, attn.heads, head_dim)
                .transpose(1, 2) for proj in (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj))
            if attn.norm_added_q is not None:
                context_q = attn.norm_added_q(context_q)
            if attn.norm_added_k is not None:
                context_k = attn.norm_added_k(context_k)
            query = torch.cat([query, context_q], dim=2)
            key = torch.cat([key, context_k], dim=2)
            value = torch.cat([value, context_v], dim=2)

        # sm_scale None: the stock call's default, 1/sqrt(D), on both paths.
        hidden_states = int8_attention_or_sdpa(query, key, value, force=self.force)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim)
        hidden_states = hidden_states.to(query.dtype)

        if encoder_hidden_states is not None:
            hidden_states, encoder_hidden_states = (
                hidden_states[:, : residual.shape[1]], hidden_states[:, residual.shape[1]:])
            if not attn.context_pre_only:
                encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        if encoder_hidden_states is not None:
            return hidden_states, encoder_hidden_states
        return hidden_states


class Int8FluxAttnProcessor:
    """``FluxAttnProcessor`` with INT8 attention where it runs, else the stock dispatch call
    (with the replaced processor's attention backend)."""

    def __init__(self, previous: Any = None, *, force: bool = False) -> None:
        self.previous = previous
        self.force = force

    def __call__(self, attn, hidden_states: torch.Tensor,
                 encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 image_rotary_emb: torch.Tensor | None = None) -> Any:
        query, key, value, encoder_query, encoder_key, encoder_value = _get_qkv_projections(
            attn, hidden_states, encoder_hidden_states)
        query = attn.norm_q(query.unflatten(-1, (-1, attn.head_dim)))
        key = attn.norm_k(key.unflatten(-1, (-1, attn.head_dim)))
        value = value.unflatten(-1, (-1, attn.head_dim))
        if attn.added_kv_proj_dim is not None:
            encoder_query = attn.norm_added_q(encoder_query.unflatten(-1, (-1, attn.head_dim)))
            encoder_key = attn.norm_added_k(encoder_key.unflatten(-1, (-1, attn.head_dim)))
            encoder_value = encoder_value.unflatten(-1, (-1, attn.head_dim))
            query = torch.cat([encoder_query, query], dim=1)
            key = torch.cat([encoder_key, key], dim=1)
            value = torch.cat([encoder_value, value], dim=1)
        if image_rotary_emb is not None:
            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        hidden_states = self._attention(query, key, value, attention_mask)
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)

        if encoder_hidden_states is not None:
            encoder_hidden_states, hidden_states = hidden_states.split_with_sizes(
                [encoder_hidden_states.shape[1],
                 hidden_states.shape[1] - encoder_hidden_states.shape[1]], dim=1)
            hidden_states = attn.to_out[0](hidden_states.contiguous())
            hidden_states = attn.to_out[1](hidden_states)
            encoder_hidden_states = attn.to_add_out(encoder_hidden_states.contiguous())
            return hidden_states, encoder_hidden_states
        return hidden_states

    def _attention(self, query, key, value, attention_mask):
        """Attention on (B, N, H, D): the kernel on (B, H, N, D) views (no copies; its output
        keeps the view's strides, so the transpose back is contiguous), else the stock call."""
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
        reason = dispatch.int8_attention_blocker(q, k, v, attn_mask=attention_mask,
                                                force=self.force)
        if reason is None:
            from .int8_attention import int8_attention

            return int8_attention(q, k, v).transpose(1, 2)
        logger.debug("int8 attention falls back to diffusers' dispatch: %s", reason)
        previous = self.previous
        return dispatch_attention_fn(
            query, key, value, attn_mask=attention_mask,
            backend=getattr(previous, "_attention_backend", None),
            parallel_config=getattr(previous, "_parallel_config", None))

