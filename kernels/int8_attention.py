"""INT8 quantized attention forward (SageAttention-style), for (batch, heads, tokens, head_dim).

The math, per (batch, head):

1. K is smoothed: ``K - mean(K over tokens)``. Softmax is invariant to adding a constant per query
   row, and ``q · mean(K)`` is exactly such a constant, so the output does not change; what changes
   is that the channel-wise offset K carries in diffusion models (large, shared by all tokens) no
   longer eats the INT8 range, which is what makes per-block INT8 accurate enough.
2. Q (with ``sm_scale * log2(e)`` folded in, so the softmax can use ``exp2``) and smoothed K are
   quantized to INT8 per block of tokens: ``scale = max|x| / 127``, round half away from zero.
3. ``S = (Q_i8 · K_i8ᵀ as int32) * q_scale * k_scale``, online softmax in fp32, ``P`` cast to the
   input dtype and ``P · V`` accumulated in fp32 (FlashAttention-2 loop).

Hardware choices (Hopper H100/H200 is the target; sm80 works too): INT8 tensor-core MMA runs at
twice the fp16 rate (~1979 vs ~989 dense TOPS on H100 SXM) and halves the bytes of Q and K moved
into shared memory. Compiled offline for sm_90a (see tests/kernel_ops/test_gpu_compile.py), Triton
lowers ``tl.dot(int8, int8) -> int32`` to ``wgmma.mma_async ... m64n64k32.s32.s8.s8`` and P·V to
``wgmma ... m64nDk16.f32.f16.f16``; loading K as (BLOCK_N, D) rows and transposing with
``tl.trans`` gives the K-major operand 8-bit wgmma requires. BLOCK_M = 128 query rows with
8 warps is two warpgroups of one 64-row wgmma tile each. The limit is registers: the fp32
accumulator (128 x D), the score tile (128 x BLOCK_N) and P live there. ptxas reports, for
sm_90a: D = 64 at 8 warps 190 registers and no spill (at 4 warps: 255 and 224 bytes spilled);
D = 128 at BLOCK_N = 64, 8 warps, 255 registers and 8 bytes spilled (BLOCK_N = 128 spills
776 bytes, BLOCK_N = 32 spills none but halves the wgmma N). Shared memory is small (20 KiB at
D = 64, 40 KiB at D = 128 with the pipeline stages), far under Hopper's 228 KiB. These are
compile-time facts, not timings: benchmarks/kernel_speed.py has the numbers when run on a GPU. The
quantization blocks are the attention tiles, so each tile loads one Q scale and one K scale.

Two launches per call: :func:`quantize_qk` (Q blocks, and K's mean and blocks, in one grid) and
the attention kernel. The K mean is not a separate reduction: each K program sums K over all
tokens of its head itself, then quantizes its own chunk of blocks. With few keys (77 text tokens
in cross-attention: two blocks) that is one program per head and K is read twice from cache;
with thousands of keys a head's K is split into chunks of :data:`K_BLOCKS_PER_PROGRAM` blocks, so
the grid stays wide, and every chunk re-reads the head's K for the mean (from L2: a head of 4096
keys at D = 128 is 1 MiB). :func:`int8_attention` checks its inputs once and calls the launchers
without their own checks, so a small call pays two launches and one round of Python checks.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .errors import KernelInputError
from .launch import on_device

SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634

# (BLOCK_M, BLOCK_N, num_warps, num_stages) per head_dim; see the module docstring for why.
_CONFIGS: dict[int, tuple[int, int, int, int]] = {
    64: (128, 64, 8, 4),
    128: (128, 64, 8, 3),
}


@triton.jit
def _quantize_block(x_ptrs, row_ok, out_ptrs, scale_ptr, shift, multiplier):
    x = tl.load(x_ptrs, mask=row_ok, other=0.0).to(tl.float32)
    # Padded rows must stay 0, or they would set the block's max and waste its range.
    x = tl.where(row_ok, (x - shift) * multiplier, 0.0)
    amax = tl.max(tl.max(tl.abs(x), axis=1), axis=0)
    inv_scale = tl.where(amax > 0.0, 127.0 / amax, 0.0)
    y = x * inv_scale
    # Round half away from zero; the float->int cast truncates toward zero and |y| <= 127.
    y = tl.where(y >= 0.0, y + 0.5, y - 0.5)
    tl.store(out_ptrs, y.to(tl.int8), mask=row_ok)
    tl.store(scale_ptr, amax / 127.0)


@triton.jit
def _quantize_qk_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, q_scale_ptr, k_scale_ptr,
    n_q, n_kv, n_heads, n_q_blocks, n_kv_blocks,
    stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn,
    q_multiplier,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    K_BLOCKS: tl.constexpr, SMOOTH_K: tl.constexpr,
):
    """Programs [0, n_q_blocks) quantize one Q block each; the rest one chunk of K_BLOCKS K
    blocks each, after computing their head's K mean (the smoothing) themselves."""
    pid = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_d = tl.arange(0, D)
    if pid < n_q_blocks:
        offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = offs_m[:, None] < n_q
        _quantize_block(
            q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :],
            row_ok, q_out_ptr + pid_bh * n_q * D + offs_m[:, None] * D + offs_d[None, :],
            q_scale_ptr + pid_bh * n_q_blocks + pid, 0.0, q_multiplier,
        )
    else:
        offs_n = tl.arange(0, BLOCK_N)
        k_head = k_ptr + b * stride_kb + h * stride_kh + offs_d[None, :]
        mean = tl.zeros([D], dtype=tl.float32)
        if SMOOTH_K:
            for start in range(0, n_kv, BLOCK_N):
                rows = start + offs_n[:, None]
                x = tl.load(k_head + rows * stride_kn, mask=rows < n_kv, other=0.0)
                mean += tl.sum(x.to(tl.float32), axis=0)
            mean = mean / n_kv
        first = (pid - n_q_blocks) * K_BLOCKS
        for blk in range(first, tl.minimum(first + K_BLOCKS, n_kv_blocks)):
            rows = blk * BLOCK_N + offs_n[:, None]
            _quantize_block(
                k_head + rows * stride_kn, rows < n_kv,
                k_out_ptr + pid_bh * n_kv * D + rows * D + offs_d[None, :],
                k_scale_ptr + pid_bh * n_kv_blocks + blk, mean[None, :], 1.0,
            )


@triton.jit
def _attn_tile(
    acc, m_i, l_i, q, q_scale, k_ptrs, v_ptrs, k_scale_ptr, start_n, n_kv, stride_vn,
    offs_n, BLOCK_N: tl.constexpr, MASK_KV: tl.constexpr, UPCAST_PV: tl.constexpr,
):
    if MASK_KV:
        kv_ok = (start_n + offs_n) < n_kv
        k = tl.load(k_ptrs, mask=kv_ok[:, None], other=0)
        v = tl.load(v_ptrs, mask=kv_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    k_scale = tl.load(k_scale_ptr + start_n // BLOCK_N)
    s = tl.dot(q, tl.trans(k), out_dtype=tl.int32).to(tl.float32) * (q_scale * k_scale)
    if MASK_KV:
        s = tl.where(kv_ok[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None]
    if UPCAST_PV:
        # Same products as the bf16 tensor-core dot (bf16 x bf16 is exact in fp32), only for the
        # interpreter, whose tl.dot multiplies bf16's raw uint16 bits.
        acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _int8_attn_fwd_kernel(
    q_ptr, q_scale_ptr, k_ptr, k_scale_ptr, v_ptr, o_ptr,
    n_q, n_kv, n_heads, n_q_blocks, n_kv_blocks,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST_PV: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_ok = offs_m[:, None] < n_q

    # Quantized Q and K are written contiguous (B, H, N, D) by the quantize kernel.
    q = tl.load(q_ptr + pid_bh * n_q * D + offs_m[:, None] * D + offs_d[None, :], mask=q_ok,
                other=0)
    q_scale = tl.load(q_scale_ptr + pid_bh * n_q_blocks + pid_m)
    k_ptrs = k_ptr + pid_bh * n_kv * D + offs_n[:, None] * D + offs_d[None, :]
    v_ptrs = v_ptr + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]
    k_scale_ptr = k_scale_ptr + pid_bh * n_kv_blocks

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)

    # Full key blocks run without masks; only the tail block pays for them.
    n_full = (n_kv // BLOCK_N) * BLOCK_N
    for start_n in range(0, n_full, BLOCK_N):
        acc, m_i, l_i = _attn_tile(
            acc, m_i, l_i, q, q_scale, k_ptrs + start_n * D, v_ptrs + start_n * stride_vn,
            k_scale_ptr, start_n, n_kv, stride_vn, offs_n, BLOCK_N, False, UPCAST_PV,
        )
    if n_full < n_kv:
        acc, m_i, l_i = _attn_tile(
            acc, m_i, l_i, q, q_scale, k_ptrs + n_full * D, v_ptrs + n_full * stride_vn,
            k_scale_ptr, n_full, n_kv, stride_vn, offs_n, BLOCK_N, True, UPCAST_PV,
        )

    out = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :]
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=q_ok)


# Decided when the module is imported: TRITON_INTERPRET=1 at that moment builds the kernels for
# Triton's CPU interpreter instead of the GPU compiler.
RUNS_IN_INTERPRETER = not isinstance(_int8_attn_fwd_kernel, triton.runtime.JITFunction)


def _check_bhnd(name: str, x: torch.Tensor) -> None:
    if x.ndim != 4:
        raise KernelInputError(
            f"{name} must be (batch, heads, tokens, head_dim), got shape {tuple(x.shape)}"
        )
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelInputError(
            f"{name} must be float16 or bfloat16, got {x.dtype}; cast it (x.half()) or use "
            "genloop.kernels.int8_attention_or_sdpa, which falls back to PyTorch"
        )
    if x.stride(-1) != 1:
        raise KernelInputError(
            f"{name} must be contiguous in head_dim (stride(-1) == 1), got strides {x.stride()}; "
            "call .contiguous() first"
        )


#: K blocks one quantization program handles (a chunk of 1024 keys at BLOCK_N = 64).
K_BLOCKS_PER_PROGRAM = 16


def quantize_qk(
    q: torch.Tensor, k: torch.Tensor, *, block_m: int, block_n: int, q_multiplier: float,
    smooth_k: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize (B, H, N, D) Q and K to INT8 per block of tokens, in one launch.

    Returns ``(q_i8, q_scale, k_i8, k_scale)``: int8 contiguous (B, H, N, D) and float32 scales
    (B, H, ceil(N / block)), with ``q * q_multiplier ≈ q_i8 * q_scale`` per Q block of
    ``block_m`` and ``k - mean_k ≈ k_i8 * k_scale`` per K block of ``block_n``, ``mean_k`` the
    per-(batch, head) mean of K over its tokens (``smooth_k=False``: no mean subtracted).
    """
    for name, t in (("q", q), ("k", k)):
        _check_bhnd(name, t)
    if q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3] or q.device != k.device:
        raise KernelInputError(
            f"q {tuple(q.shape)} on {q.device} and k {tuple(k.shape)} on {k.device} must share "
            "batch, heads, head_dim and device")
    if q.shape[3] not in SUPPORTED_HEAD_DIMS:
        raise KernelInputError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {q.shape[3]}")
    for name, block in (("block_m", block_m), ("block_n", block_n)):
        if block < 16 or block & (block - 1):
            # tl.arange needs a power of two, and tl.dot tiles at least 16 rows.
            raise KernelInputError(f"{name} must be a power of two >= 16, got {block}")
    return _quantize_qk(q, k, block_m, block_n, q_multiplier, smooth_k)


def _quantize_qk(q, k, block_m, block_n, q_multiplier, smooth_k):
    batch, heads, n_q, head_dim = q.shape
    n_kv = k.shape[2]
    n_q_blocks, n_kv_blocks = triton.cdiv(n_q, block_m), triton.cdiv(n_kv, block_n)
    n_k_programs = triton.cdiv(n_kv_blocks, K_BLOCKS_PER_PROGRAM)
    q_i8 = torch.empty((batch, heads, n_q, head_dim), dtype=torch.int8, device=q.device)
    k_i8 = torch.empty((batch, heads, n_kv, head_dim), dtype=torch.int8, device=q.device)
    q_scale = torch.empty((batch, heads, n_q_blocks), dtype=torch.float32, device=q.device)
    k_scale = torch.empty((batch, heads, n_kv_blocks), dtype=torch.float32, device=q.device)
    with on_device(q.device):
        _quantize_qk_kernel[(n_q_blocks + n_k_programs, batch * heads)](
            q, k, q_i8, k_i8, q_scale, k_scale,
            n_q, n_kv, heads, n_q_blocks, n_kv_blocks,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            float(q_multiplier),
            D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, K_BLOCKS=K_BLOCKS_PER_PROGRAM,
            SMOOTH_K=smooth_k,
        )
    return q_i8, q_scale, k_i8, k_scale


def int8_attention_quantized(
    q_i8: torch.Tensor, q_scale: torch.Tensor, k_i8: torch.Tensor, k_scale: torch.Tensor,
    v: torch.Tensor, *, block_m: int, block_n: int, num_warps: int = 4, num_stages: int = 3,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention from pre-quantized Q and K (:func:`quantize_qk` output with the same blocks).

    ``q_scale`` must already hold ``sm_scale * log2(e)``: the kernel's softmax uses ``exp2``.
    The output has v's dtype; pass ``out`` (B, H, Nq, D) to choose its memory layout.
    """
    _check_bhnd("v", v)
    batch, heads, n_kv, head_dim = v.shape
    n_q = q_i8.shape[2]
    for name, t, n in (("q_i8", q_i8, n_q), ("k_i8", k_i8, n_kv)):
        if (t.dtype != torch.int8 or not t.is_contiguous() or t.device != v.device
                or t.shape != (batch, heads, n, head_dim)):
            raise KernelInputError(
                f"{name} must be contiguous int8 {(batch, heads, n, head_dim)} on {v.device} "
                f"from quantize_qk, got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    n_q_blocks, n_kv_blocks = triton.cdiv(n_q, block_m), triton.cdiv(n_kv, block_n)
    for name, s, nb in (("q_scale", q_scale, n_q_blocks), ("k_scale", k_scale, n_kv_blocks)):
        if (s.dtype != torch.float32 or not s.is_contiguous() or s.device != v.device
                or s.shape != (batch, heads, nb)):
            raise KernelInputError(
                f"{name} must be contiguous float32 {(batch, heads, nb)} on {v.device} (one scale "
                f"per block), got {s.dtype} {tuple(s.shape)} on {s.device}"
            )
    if out is None:
        out = torch.empty((batch, heads, n_q, head_dim), dtype=v.dtype, device=v.device)
    elif (out.shape != (batch, heads, n_q, head_dim) or out.dtype != v.dtype
          or out.stride(-1) != 1 or out.device != v.device):
        raise KernelInputError(
            f"out must be {v.dtype} {(batch, heads, n_q, head_dim)} with stride(-1) == 1, got "
            f"{out.dtype} {tuple(out.shape)} strides {out.stride()}"
        )
    _attention(q_i8, q_scale, k_i8, k_scale, v, out, block_m, block_n, num_warps, num_stages)
    return out


def _attention(q_i8, q_scale, k_i8, k_scale, v, out, block_m, block_n, num_warps, num_stages):
    batch, heads, n_kv, head_dim = v.shape
    n_q = q_i8.shape[2]
    n_q_blocks, n_kv_blocks = triton.cdiv(n_q, block_m), triton.cdiv(n_kv, block_n)
    with on_device(v.device):
        _int8_attn_fwd_kernel[(n_q_blocks, batch * heads)](
            q_i8, q_scale, k_i8, k_scale, v, out,
            n_q, n_kv, heads, n_q_blocks, n_kv_blocks,
            v.stride(0), v.stride(1), v.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            D=head_dim, BLOCK_M=block_m, BLOCK_N=block_n,
            UPCAST_PV=v.dtype == torch.bfloat16 and RUNS_IN_INTERPRETER,
            num_warps=num_warps, num_stages=num_stages,
        )


def int8_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, sm_scale: float | None = None
) -> torch.Tensor:
    """``softmax(q kᵀ · sm_scale) v`` with INT8 Q·Kᵀ; q (B, H, Nq, D), k and v (B, H, Nkv, D).

    Takes float16/bfloat16, head_dim 64 or 128, any strides with a contiguous head_dim; raises
    :class:`KernelInputError` otherwise. ``sm_scale`` defaults to ``1 / sqrt(D)``. Runs on CUDA,
    or on CPU tensors when ``TRITON_INTERPRET=1`` was set before Triton was imported.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_bhnd(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise KernelInputError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise KernelInputError(
            f"q, k, v must share a device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise KernelInputError(
            f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
            "want q (B, H, Nq, D) and k, v (B, H, Nkv, D)"
        )
    head_dim = q.shape[3]
    if head_dim not in _CONFIGS:
        raise KernelInputError(f"head_dim must be one of {SUPPORTED_HEAD_DIMS}, got {head_dim}")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise KernelInputError("q and k need at least one token each")
    if max(q.numel(), k.numel()) >= 2**31:
        # Offsets inside the kernels are int32.
        raise KernelInputError("q and k must have fewer than 2**31 elements each; split the batch")
    block_m, block_n, num_warps, num_stages = _CONFIGS[head_dim]
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    q_i8, q_scale, k_i8, k_scale = _quantize_qk(q, k, block_m, block_n, sm_scale * LOG2E, True)
    # empty_like keeps q's strides, so the (B, N, H, D)-transposed views diffusers makes come
    # back in the same layout and the processor's transpose + reshape needs no copy.
    out = torch.empty_like(q)
    _attention(q_i8, q_scale, k_i8, k_scale, v, out, block_m, block_n, num_warps, num_stages)
    return out
