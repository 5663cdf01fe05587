"""PyTorch references for the Triton kernels: what each kernel must compute, written plainly.

``attention_reference`` and ``groupnorm_silu_reference`` are the exact math in float32 and are
also the fallbacks that :mod:`genloop.kernels.dispatch` uses off-GPU. ``int8_attention_emulated``
repeats the INT8 kernel's quantization step by step, so a test can tell the error the algorithm is
allowed (vs the exact reference) from a bug in the kernel (vs the emulation).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LOG2E = 1.4426950408889634


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, sm_scale: float | None = None
) -> torch.Tensor:
    """``softmax(q kᵀ · sm_scale) v`` computed in float32; returns float32 (B, H, Nq, D)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    return torch.matmul(scores.softmax(dim=-1), v.float())


def quantize_per_block_reference(
    x: torch.Tensor, block: int, *, multiplier: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block symmetric INT8 over dim 2 (tokens), the kernel's rounding (half away from 0).

    Returns ``(x_i8 as int8, scales float32 (B, H, ceil(N / block)))``.
    """
    n_tokens = x.shape[2]
    n_blocks = math.ceil(n_tokens / block)
    x = x.float() * multiplier
    padded = F.pad(x, (0, 0, 0, n_blocks * block - n_tokens))
    blocks = padded.unflatten(2, (n_blocks, block))
    amax = blocks.abs().amax(dim=(-1, -2))
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    y = blocks * inv[..., None, None]
    y = torch.where(y >= 0, y + 0.5, y - 0.5).trunc()
    x_i8 = y.flatten(2, 3)[:, :, :n_tokens].to(torch.int8)
    return x_i8, amax / 127.0


def int8_attention_emulated(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block_m: int, block_n: int,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """The INT8 kernel's algorithm in PyTorch: smoothed K, per-block INT8 Q and K, exact integer
    Q·Kᵀ, float32 softmax, P rounded to v's dtype, float32 P·V. Returns float32."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    k_smooth = k.float() - k.float().mean(dim=2, keepdim=True)
    q_i8, q_scale = quantize_per_block_reference(q, block_m, multiplier=scale * LOG2E)
    k_i8, k_scale = quantize_per_block_reference(k_smooth, block_n)
    # float64 holds every int8 dot product of length <= 2**37 exactly, like the int32 MMA.
    s = torch.matmul(q_i8.double(), k_i8.double().transpose(-1, -2))
    s = s * q_scale.repeat_interleave(block_m, dim=2)[:, :, : q.shape[2], None].double()
    s = s * k_scale.repeat_interleave(block_n, dim=2)[:, :, None, : k.shape[2]].double()
    s = s.float()
    p = torch.exp2(s - s.amax(dim=-1, keepdim=True))
    out = torch.matmul(p.to(v.dtype).float(), v.float())
    return out / p.sum(dim=-1, keepdim=True)


def groupnorm_silu_reference(
    x: torch.Tensor, num_groups: int, weight: torch.Tensor | None, bias: torch.Tensor | None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``silu(group_norm(x))`` computed in float32; returns float32 with x's shape."""
    w = None if weight is None else weight.float()
    b = None if bias is None else bias.float()
    return F.silu(F.group_norm(x.float(), num_groups, w, b, eps))
