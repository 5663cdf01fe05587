"""Fused GroupNorm (+ affine) + SiLU for (N, C, H, W) activations, NCHW or channels-last.

``silu(group_norm(x) * weight + bias)`` in three launches instead of torch's three passes plus a
temporary: per-chunk statistics, a tiny finalize (one program per group), and the apply, the
first and last tiled the same way; small groups take one launch (below).

Each group of a sample is viewed as a (H*W, C/G) matrix with strides (stride_hw, stride_c), which
is (1, H*W) for NCHW and (C, 1) for channels-last, so one kernel serves both layouts. A group is
split into chunks of BLOCK_HW pixels so the grid has (chunks x N x G) programs: one program per
group would give only 64 programs for a batch of 2 with 32 groups, half of an H100's 132 SMs.

Statistics: each chunk computes its own mean and M2 (sum of squared deviations) from the tile it
holds in registers, and the finalize kernel merges a group's chunks once, with Chan's parallel
formula, into two numbers (mean, rstd) that every apply program loads. That avoids the
cancellation of ``E[x²] - E[x]²`` in float32 when the mean is large against the std, and it
avoids what merging inside the apply cost: every apply program re-reading all of its group's
chunk statistics (on VAE shapes, thousands of chunks per group re-read by thousands of
programs, an L2-sized stream on top of x).

Bandwidth: x is read twice (stats, apply) and written once. For the activations of a diffusion
UNet (a few to ~40 MB in fp16) the second read mostly hits the 50 MB L2 of H100/H200, so the HBM
traffic is close to one read and one write, the floor a plain copy also pays. For VAE shapes
(64-256 MB) it does not: the second read comes from HBM, which caps this path near 2/3 of copy
bandwidth. Going past that needs a group's data kept on chip between its statistics and its
apply, across programs (Hopper's thread-block clusters and distributed shared memory hold
16 x 228 KB, a 2 MB group; Triton does not expose them) or a grid-wide wait that Triton's
interpreter cannot run; neither is done here.

Small groups (:data:`GROUP_PATH_MAX_ELEMENTS` or fewer elements, e.g. SDXL's 32 x 32 x 1280
level) take a one-launch path instead: one program per group computes the statistics chunk by
chunk (merged as it goes, Chan again), then applies, re-reading its group from L2 (at most
128 KB in fp16). Three launches cost more than the data there (2.6 MB moves in ~1 us at H200
bandwidth; a launch is a few us); the price is fewer programs (N x G). The threshold is a
guess until ``benchmarks/kernel_speed.py`` times both paths (``path=``) on a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import KernelInputError
from .launch import on_device

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# ~4K elements per tile: 32 per thread at 4 warps, enough bytes in flight per SM for HBM3
# without spilling the float32 copy of the tile.
_TILE_ELEMENTS = 4096
MAX_CHANNELS_PER_GROUP = 1024
_MAX_CHUNKS = 4096
#: Groups of at most this many elements take the one-launch path (see the module docstring).
GROUP_PATH_MAX_ELEMENTS = 65536
PATHS = ("auto", "group", "chunked")


@triton.jit
def _chunk_stats_kernel(
    x_ptr, mean_ptr, m2_ptr,
    hw, groups, n_chunks,
    stride_n, stride_c, stride_hw,
    CG: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr,
):
    pid_chunk = tl.program_id(0)
    pid_ng = tl.program_id(1)
    n = pid_ng // groups
    g = pid_ng % groups
    offs_hw = pid_chunk * BLOCK_HW + tl.arange(0, BLOCK_HW)
    offs_c = tl.arange(0, BLOCK_C)
    mask = (offs_hw[:, None] < hw) & (offs_c[None, :] < CG)
    ptrs = (x_ptr + n * stride_n + (g * CG + offs_c[None, :]) * stride_c
            + offs_hw[:, None] * stride_hw)
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(hw - pid_chunk * BLOCK_HW, BLOCK_HW) * CG
    mean = tl.sum(tl.sum(x, axis=1), axis=0) / count
    dev = tl.where(mask, x - mean, 0.0)
    m2 = tl.sum(tl.sum(dev * dev, axis=1), axis=0)
    tl.store(mean_ptr + pid_ng * n_chunks + pid_chunk, mean)
    tl.store(m2_ptr + pid_ng * n_chunks + pid_chunk, m2)


@triton.jit
def _finalize_kernel(
    mean_ptr, m2_ptr, out_ptr, hw, n_chunks, eps,
    CG: tl.constexpr, BLOCK_HW: tl.constexpr, CHUNKS_P2: tl.constexpr,
):
    """Merge one group's chunk statistics into (mean, rstd) at ``out_ptr[2 * group]``."""
    pid_ng = tl.program_id(0)
    offs_k = tl.arange(0, CHUNKS_P2)
    k_ok = offs_k < n_chunks
    means = tl.load(mean_ptr + pid_ng * n_chunks + offs_k, mask=k_ok, other=0.0)
    m2s = tl.load(m2_ptr + pid_ng * n_chunks + offs_k, mask=k_ok, other=0.0)
    counts = tl.where(k_ok, tl.minimum(hw - offs_k * BLOCK_HW, BLOCK_HW) * CG, 0).to(tl.float32)
    # "* 1.0" rather than .to(): Triton turns an int argument equal to 1 (a 1x1 image) into a
    # constexpr, which has no .to().
    total = hw * CG * 1.0
    mean = tl.sum(counts * means, axis=0) / total
    delta = means - mean
    var = tl.sum(m2s + counts * delta * delta, axis=0) / total
    tl.store(out_ptr + 2 * pid_ng, mean)
    tl.store(out_ptr + 2 * pid_ng + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _apply_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, stats_ptr,
    hw, groups,
    stride_n, stride_c, stride_hw,
    CG: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, AFFINE: tl.constexpr,
):
    pid_chunk = tl.program_id(0)
    pid_ng = tl.program_id(1)
    n = pid_ng // groups
    g = pid_ng % groups
    mean = tl.load(stats_ptr + 2 * pid_ng)
    rstd = tl.load(stats_ptr + 2 * pid_ng + 1)

    offs_hw = pid_chunk * BLOCK_HW + tl.arange(0, BLOCK_HW)
    offs_c = tl.arange(0, BLOCK_C)
    c_ok = offs_c < CG
    mask = (offs_hw[:, None] < hw) & c_ok[None, :]
    offsets = (n * stride_n + (g * CG + offs_c[None, :]) * stride_c
               + offs_hw[:, None] * stride_hw)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = (x - mean) * rstd
    if AFFINE:
        w = tl.load(w_ptr + g * CG + offs_c, mask=c_ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + g * CG + offs_c, mask=c_ok, other=0.0).to(tl.float32)
        y = y * w[None, :] + b[None, :]
    y = y * tl.sigmoid(y)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _group_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr,
    hw, groups, eps,
    stride_n, stride_c, stride_hw,
    CG: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_HW: tl.constexpr, AFFINE: tl.constexpr,
):
    """One program per (sample, group): statistics over the group's chunks, then the apply."""
    pid_ng = tl.program_id(0)
    n = pid_ng // groups
    g = pid_ng % groups
    offs_c = tl.arange(0, BLOCK_C)
    c_ok = offs_c < CG
    base = n * stride_n + (g * CG + offs_c[None, :]) * stride_c
    count = 0.0
    mean = 0.0
    m2 = 0.0
    for start in range(0, hw, BLOCK_HW):
        offs_hw = start + tl.arange(0, BLOCK_HW)
        mask = (offs_hw[:, None] < hw) & c_ok[None, :]
        x = tl.load(x_ptr + base + offs_hw[:, None] * stride_hw, mask=mask,
                    other=0.0).to(tl.float32)
        n_b = tl.minimum(hw - start, BLOCK_HW) * CG * 1.0
        mean_b = tl.sum(tl.sum(x, axis=1), axis=0) / n_b
        dev = tl.where(mask, x - mean_b, 0.0)
        m2_b = tl.sum(tl.sum(dev * dev, axis=1), axis=0)
        total = count + n_b
        delta = mean_b - mean
        mean += delta * (n_b / total)
        m2 += m2_b + delta * delta * (count * n_b / total)
        count = total
    rstd = 1.0 / tl.sqrt(m2 / count + eps)
    if AFFINE:
        w = tl.load(w_ptr + g * CG + offs_c, mask=c_ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + g * CG + offs_c, mask=c_ok, other=0.0).to(tl.float32)
    for start in range(0, hw, BLOCK_HW):
        offs_hw = start + tl.arange(0, BLOCK_HW)
        mask = (offs_hw[:, None] < hw) & c_ok[None, :]
        offsets = base + offs_hw[:, None] * stride_hw
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if AFFINE:
            y = y * w[None, :] + b[None, :]
        y = y * tl.sigmoid(y)
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


# Decided when the module is imported: TRITON_INTERPRET=1 at that moment builds the kernels for
# Triton's CPU interpreter instead of the GPU compiler.
RUNS_IN_INTERPRETER = not isinstance(_apply_kernel, triton.runtime.JITFunction)


def _layout_strides(x: torch.Tensor) -> tuple[int, int, int]:
    """(stride_n, stride_c, stride_hw) for NCHW or channels-last; raises for other layouts."""
    if x.is_contiguous():
        return x.stride(0), x.stride(1), 1
    if x.is_contiguous(memory_format=torch.channels_last):
        return x.stride(0), 1, x.stride(3)
    raise KernelInputError(
        f"x must be contiguous NCHW or channels-last, got strides {x.stride()}; call "
        ".contiguous() or .contiguous(memory_format=torch.channels_last) first"
    )


def check_groupnorm_silu_inputs(
    x: torch.Tensor, num_groups: int, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> None:
    """Raise :class:`KernelInputError` unless ``groupnorm_silu`` takes these tensors."""
    if x.ndim != 4:
        raise KernelInputError(f"x must be (N, C, H, W), got shape {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelInputError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    channels = x.shape[1]
    if num_groups <= 0 or channels % num_groups != 0:
        raise KernelInputError(
            f"channels ({channels}) must be a multiple of num_groups ({num_groups})")
    if channels // num_groups > MAX_CHANNELS_PER_GROUP:
        raise KernelInputError(
            f"at most {MAX_CHANNELS_PER_GROUP} channels per group, got {channels // num_groups}"
        )
    if (weight is None) != (bias is None):
        raise KernelInputError("give both weight and bias (affine) or neither")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.shape != (channels,) or t.device != x.device
                              or not t.is_contiguous()):
            raise KernelInputError(
                f"{name} must be contiguous ({channels},) on {x.device}, got "
                f"{tuple(t.shape)} on {t.device}"
            )
    _layout_strides(x)
    if x.numel() >= 2**31:
        raise KernelInputError("x must have fewer than 2**31 elements (int32 offsets); split it")


def group_path_fits(hw: int, channels_per_group: int) -> bool:
    """Whether ``path="auto"`` takes the one-launch group path for groups of this size."""
    return hw * channels_per_group <= GROUP_PATH_MAX_ELEMENTS


def groupnorm_silu(
    x: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None, eps: float = 1e-5, *, path: str = "auto",
) -> torch.Tensor:
    """``silu(group_norm(x, num_groups, weight, bias, eps))`` in x's dtype and memory layout.

    Statistics are computed in float32. Runs on CUDA, or on CPU tensors when ``TRITON_INTERPRET=1``
    was set before Triton was imported; raises :class:`KernelInputError` for inputs it does not
    take (see :func:`check_groupnorm_silu_inputs`). ``path`` (for benchmarks and tests) forces
    the one-launch ``"group"`` kernel or the three-launch ``"chunked"`` one; ``"auto"`` picks
    by group size.
    """
    check_groupnorm_silu_inputs(x, num_groups, weight, bias)
    if path not in PATHS:
        raise KernelInputError(f"path must be one of {PATHS}, got {path!r}")
    batch, channels, height, width = x.shape
    hw = height * width
    cg = channels // num_groups
    block_c = triton.next_power_of_2(cg)
    block_hw = min(triton.next_power_of_2(hw), max(1, _TILE_ELEMENTS // block_c))
    stride_n, stride_c, stride_hw = _layout_strides(x)
    if path == "group" or (path == "auto" and group_path_fits(hw, cg)):
        y = torch.empty_like(x)  # keeps x's memory format
        with on_device(x.device):
            _group_kernel[(batch * num_groups,)](
                x, y, weight if weight is not None else x, bias if bias is not None else x,
                hw, num_groups, float(eps), stride_n, stride_c, stride_hw,
                CG=cg, BLOCK_C=block_c, BLOCK_HW=block_hw, AFFINE=weight is not None,
                num_warps=4,
            )
        return y
    n_chunks = triton.cdiv(hw, block_hw)
    if n_chunks > _MAX_CHUNKS:
        raise KernelInputError(f"at most {_MAX_CHUNKS * block_hw} pixels per image, got {hw}")
    y = torch.empty_like(x)  # keeps x's memory format
    stats = torch.empty((2, batch * num_groups, n_chunks), dtype=torch.float32, device=x.device)
    mean_rstd = torch.empty((batch * num_groups, 2), dtype=torch.float32, device=x.device)
    grid = (n_chunks, batch * num_groups)
    with on_device(x.device):
        _chunk_stats_kernel[grid](
            x, stats[0], stats[1], hw, num_groups, n_chunks, stride_n, stride_c, stride_hw,
            CG=cg, BLOCK_C=block_c, BLOCK_HW=block_hw, num_warps=4,
        )
        _finalize_kernel[(batch * num_groups,)](
            stats[0], stats[1], mean_rstd, hw, n_chunks, float(eps),
            CG=cg, BLOCK_HW=block_hw, CHUNKS_P2=triton.next_power_of_2(n_chunks), num_warps=4,
        )
        _apply_kernel[grid](
            x, y, weight if weight is not None else x, bias if bias is not None else x,
            mean_rstd, hw, num_groups, stride_n, stride_c, stride_hw,
            CG=cg, BLOCK_C=block_c, BLOCK_HW=block_hw, AFFINE=weight is not None, num_warps=4,
        )
    return y
