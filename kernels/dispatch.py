"""Run a Triton kernel where it can run, and the PyTorch path everywhere else.

``can_use_*`` answer "would the kernel run on these tensors here?": Triton importable, tensors on
a CUDA GPU the kernel is written for, and a shape, dtype and layout it takes. The ``*_or_*``
functions then call the kernel or the PyTorch op with the same meaning, so a caller (an attention
processor, a hook, the engine) never needs its own branch, and a machine without a GPU or without
Triton keeps working.

The INT8 kernel is also skipped where it cannot win, as measured by ``make gpu-check`` on an
H200 (2026-11-30, fp16 and bf16, diffusers layouts, cosine >= 0.9999 everywhere):

- on Hopper and newer, PyTorch's default SDPA is cuDNN attention, and the kernel lost to it at
  every shape (0.63-0.95x, SDXL to Flux at 2k); it is not dispatched there;
- against FlashAttention-2 (SDPA's default before Hopper) it won from 4k keys (1.26-1.48x fp16,
  1.02-1.48x bf16) and lost at 1k keys (0.3-0.4x) and on 77-key cross-attention, where its K
  mean, two quantization launches and Python checks cost more than its INT8 Q·Kᵀ saves. The
  Ampere/Ada figures are inferred from FlashAttention-2 on the H200, not measured on those GPUs.

``force=True`` runs a kernel wherever it runs *correctly*, even where it will not win, and lets
CPU tensors use it when the kernels were built for Triton's interpreter (``TRITON_INTERPRET=1``
set before the first kernel import); that is how the tests run the real kernels on any shape,
with or without a GPU. ``force`` never bypasses the shape checks.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

INT8_ATTENTION_HEAD_DIMS = (64, 128)
#: Below this many keys the INT8 kernel's fixed costs outweigh its faster Q·Kᵀ (see above).
INT8_ATTENTION_MIN_KV_TOKENS = 4096
#: From this compute capability on, SDPA's default (cuDNN attention) beats the kernel.
INT8_ATTENTION_SDPA_WINS_FROM = (9, 0)
_HALF_DTYPES = (torch.float16, torch.bfloat16)


@functools.cache
def triton_available() -> bool:
    """Whether Triton can be imported (checked once; no import happens here)."""
    return importlib.util.find_spec("triton") is not None


def _log_fallback(message: str, reason: str) -> None:
    """Debug-log why a kernel was skipped, except while torch.compile traces (a logger call
    there splits the graph at every attention and every norm)."""
    if not torch.compiler.is_compiling():
        logger.debug(message, reason)


def _device_blocker(
    t: torch.Tensor, force: bool, min_capability: tuple[int, int], kernel_module: str
) -> str | None:
    if not triton_available():
        return "triton is not installed"
    if t.device.type == "cuda":
        if torch.version.cuda is None:
            return "the kernels are tuned for NVIDIA GPUs, not ROCm"
        if torch.cuda.get_device_capability(t.device) < min_capability:
            return f"needs compute capability >= {min_capability}"
        return None
    if t.device.type == "cpu" and force:
        if importlib.import_module(f".{kernel_module}", __package__).RUNS_IN_INTERPRETER:
            return None
        return "force=True on CPU needs TRITON_INTERPRET=1 set before the kernels are imported"
    return f"tensors on {t.device.type} (pass force=True with TRITON_INTERPRET=1 to run on CPU)"


def int8_attention_blocker(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
    attn_mask: torch.Tensor | None = None, force: bool = False,
) -> str | None:
    """Why the INT8 kernel cannot run on these inputs, or None if it can."""
    if attn_mask is not None:
        return "attention masks are not supported"
    if not (q.ndim == k.ndim == v.ndim == 4):
        return "q, k, v must be (batch, heads, tokens, head_dim)"
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _HALF_DTYPES:
        return f"dtypes must all be float16 or bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}"
    if not (q.device == k.device == v.device):
        return "q, k, v are on different devices"
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        return f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if q.shape[3] not in INT8_ATTENTION_HEAD_DIMS:
        return f"head_dim {q.shape[3]} is not one of {INT8_ATTENTION_HEAD_DIMS}"
    if q.shape[2] == 0 or k.shape[2] == 0:
        return "empty sequence"
    if max(q.numel(), k.numel()) >= 2**31:
        return "more than 2**31 elements"
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        return "head_dim is not contiguous"
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return "no backward pass; use it under torch.no_grad() or inference_mode()"
    # INT8 tensor-core MMA with bf16 P.V needs Ampere (sm80) or newer.
    blocker = _device_blocker(q, force, (8, 0), "int8_attention")
    if blocker is None and not force and k.shape[2] < INT8_ATTENTION_MIN_KV_TOKENS:
        return f"{k.shape[2]} keys: SDPA is faster below {INT8_ATTENTION_MIN_KV_TOKENS}"
    if blocker is None and not force and sdpa_beats_int8(q.device):
        return "SDPA's cuDNN attention is faster on this GPU (measured on an H200)"
    return blocker


def sdpa_beats_int8(device: torch.device) -> bool:
    """Whether SDPA's default on ``device`` is cuDNN attention, which the INT8 kernel does not
    beat (Hopper and newer)."""
    return (device.type == "cuda"
            and torch.cuda.get_device_capability(device) >= INT8_ATTENTION_SDPA_WINS_FROM)


def can_use_int8_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
    attn_mask: torch.Tensor | None = None, force: bool = False,
) -> bool:
    """Whether :func:`int8_attention_or_sdpa` would use the INT8 Triton kernel for these inputs."""
    return int8_attention_blocker(q, k, v, attn_mask=attn_mask, force=force) is None


def int8_attention_or_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, sm_scale: float | None = None,
    attn_mask: torch.Tensor | None = None, force: bool = False,
) -> torch.Tensor:
    """Attention over (B, H, N, D): the INT8 kernel where it can run, else PyTorch's
    ``scaled_dot_product_attention`` (same arguments, same output dtype and shape)."""
    reason = int8_attention_blocker(q, k, v, attn_mask=attn_mask, force=force)
    if reason is None:
        from .int8_attention import int8_attention

        return int8_attention(q, k, v, sm_scale=sm_scale)
    _log_fallback("int8 attention falls back to SDPA: %s", reason)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=sm_scale)


def groupnorm_silu_blocker(
    x: torch.Tensor, num_groups: int, weight: torch.Tensor | None, bias: torch.Tensor | None,
    *, force: bool = False,
) -> str | None:
    """Why the fused GroupNorm+SiLU kernel cannot run on these inputs, or None if it can."""
    if not triton_available():
        return "triton is not installed"
    from .errors import KernelInputError
    from .groupnorm_silu import check_groupnorm_silu_inputs

    try:
        check_groupnorm_silu_inputs(x, num_groups, weight, bias)
    except KernelInputError as exc:
        return str(exc)
    if x.requires_grad and torch.is_grad_enabled():
        return "no backward pass; use it under torch.no_grad() or inference_mode()"
    return _device_blocker(x, force, (7, 0), "groupnorm_silu")


def can_use_groupnorm_silu(
    x: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None, *, force: bool = False,
) -> bool:
    """Whether :func:`groupnorm_silu_or_torch` would use the fused Triton kernel here."""
    return groupnorm_silu_blocker(x, num_groups, weight, bias, force=force) is None


def groupnorm_silu_or_torch(
    x: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None, eps: float = 1e-5, *, force: bool = False,
) -> torch.Tensor:
    """``silu(group_norm(x))``: the fused kernel where it can run, else group_norm + silu."""
    reason = groupnorm_silu_blocker(x, num_groups, weight, bias, force=force)
    if reason is None:
        from .groupnorm_silu import groupnorm_silu

        return groupnorm_silu(x, num_groups, weight, bias, eps)
    _log_fallback("groupnorm+silu falls back to torch: %s", reason)
    return F.silu(F.group_norm(x, num_groups, weight, bias, eps))
