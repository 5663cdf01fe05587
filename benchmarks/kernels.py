"""GPU benchmark of genloop's Triton kernels against PyTorch, for an H100/H200-class machine.

    python benchmarks/kernels.py            # tables
    python benchmarks/kernels.py --json     # one JSON object
    python benchmarks/kernels.py --quick    # 1k/4k tokens and two GroupNorm shapes only
    python benchmarks/kernels.py --sweep    # also time other INT8 attention block configs

INT8 attention against ``scaled_dot_product_attention`` with the flash backend (FlashAttention-2
inside PyTorch) at 1k, 4k and 16k tokens, head_dim 64 and 128, fp16 and bf16. ``int8`` is the
whole call (K mean, quantization of Q and K, attention); ``int8 attn`` the attention kernel alone
on pre-quantized inputs, to show what the quantization passes cost. TFLOP/s count the
4·B·H·N²·D FLOPs of the two matmuls for every variant, so they compare like for like; ``cos`` is
the cosine similarity of the INT8 output to SDPA's, a guard against timing a broken kernel.

Fused GroupNorm+SiLU against ``F.silu(F.group_norm(x))`` on UNet/VAE activation shapes, NCHW and
channels-last: GB/s count one read and one write of x (what the op must move) for both, next to
a plain copy of the same tensor (``torch.empty_like(x).copy_(x)``) as the bandwidth ceiling.

Times are ``triton.testing.do_bench`` quantiles 0.5 / 0.2 / 0.8 in ms. Goals (issue 6): INT8
attention >= 1.8x SDPA at 4k+ tokens; GroupNorm+SiLU >= 70% of copy bandwidth.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys

import torch
import torch.nn.functional as F
from pydantic import BaseModel

QUANTILES = [0.5, 0.2, 0.8]
ATTENTION_TOKENS = (1024, 4096, 16384)
HEAD_DIMS = (64, 128)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# A classifier-free-guidance batch of 2, with 1024 channels of heads (16 x 64 or 8 x 128), as in
# SDXL's and SD3's transformer blocks.
ATTENTION_BATCH = 2
ATTENTION_CHANNELS = 1024
# (N, C, H, W, groups): SDXL UNet at 1024 px (128x128 latents, CFG batch 2), SD VAE decoder.
GROUPNORM_SHAPES = [
    (2, 320, 128, 128, 32),
    (2, 640, 64, 64, 32),
    (2, 1280, 32, 32, 32),
    (1, 256, 512, 512, 32),
    (1, 128, 1024, 1024, 32),
]


class Timing(BaseModel):
    median_ms: float
    p20_ms: float
    p80_ms: float


class AttentionResult(BaseModel):
    dtype: str
    tokens: int
    head_dim: int
    batch: int
    heads: int
    sdpa: Timing
    int8: Timing
    int8_attn_only: Timing
    sdpa_tflops: float
    int8_tflops: float
    int8_attn_only_tflops: float
    speedup: float
    cosine_vs_sdpa: float


class GroupNormResult(BaseModel):
    dtype: str
    shape: tuple[int, int, int, int]
    groups: int
    layout: str
    torch: Timing
    fused: Timing
    copy_baseline: Timing
    torch_gbps: float
    fused_gbps: float
    copy_gbps: float
    fused_fraction_of_copy: float
    speedup: float


class ConfigResult(BaseModel):
    """The INT8 attention kernel alone (fp16, 4k tokens) under one block config."""

    head_dim: int
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    current: bool
    attn_only: Timing
    tflops: float


class Report(BaseModel):
    gpu: str
    torch_version: str
    triton_version: str
    attention: list[AttentionResult]
    groupnorm: list[GroupNormResult]
    sweep: list[ConfigResult] = []


def _bench(fn) -> Timing:
    from triton.testing import do_bench

    median, p20, p80 = do_bench(fn, warmup=10, rep=50, quantiles=QUANTILES)
    return Timing(median_ms=median, p20_ms=p20, p80_ms=p80)


def bench_attention(tokens: int, head_dim: int, dtype_name: str) -> AttentionResult:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from genloop.kernels import int8_attention as ia

    dtype = DTYPES[dtype_name]
    heads = ATTENTION_CHANNELS // head_dim
    shape = (ATTENTION_BATCH, heads, tokens, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))

    def sdpa():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    block_m, block_n, warps, stages = ia._CONFIGS[head_dim]
    q_i8, q_scale = ia.quantize_per_block(q, block_m, multiplier=ia.LOG2E / math.sqrt(head_dim))
    k_i8, k_scale = ia.quantize_per_block(k, block_n, mean=k.mean(dim=2, dtype=torch.float32))

    def int8_only():
        return ia.int8_attention_quantized(
            q_i8, q_scale, k_i8, k_scale, v, block_m=block_m, block_n=block_n,
            num_warps=warps, num_stages=stages,
        )

    cosine = F.cosine_similarity(
        ia.int8_attention(q, k, v).float().flatten(), sdpa().float().flatten(), dim=0
    ).item()
    t_sdpa, t_int8 = _bench(sdpa), _bench(lambda: ia.int8_attention(q, k, v))
    t_only = _bench(int8_only)
    flops = 4.0 * ATTENTION_BATCH * heads * tokens * tokens * head_dim

    def tflops(t: Timing) -> float:
        return flops / (t.median_ms * 1e-3) / 1e12

    return AttentionResult(
        dtype=dtype_name, tokens=tokens, head_dim=head_dim, batch=ATTENTION_BATCH, heads=heads,
        sdpa=t_sdpa, int8=t_int8, int8_attn_only=t_only, sdpa_tflops=tflops(t_sdpa),
        int8_tflops=tflops(t_int8), int8_attn_only_tflops=tflops(t_only),
        speedup=t_sdpa.median_ms / t_int8.median_ms, cosine_vs_sdpa=cosine,
    )


# Candidates that compile for sm_90a without (or with few) register spills; see the
# int8_attention module docstring. (BLOCK_M, BLOCK_N, num_warps, num_stages).
SWEEP = {
    64: [(128, 64, 8, 4), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 4)],
    128: [(128, 64, 8, 3), (128, 32, 8, 3), (128, 64, 16, 3), (64, 32, 4, 3)],
}


def sweep_attention_configs(tokens: int = 4096) -> list[ConfigResult]:
    from genloop.kernels import int8_attention as ia

    results = []
    for head_dim, configs in SWEEP.items():
        heads = ATTENTION_CHANNELS // head_dim
        shape = (ATTENTION_BATCH, heads, tokens, head_dim)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
        flops = 4.0 * ATTENTION_BATCH * heads * tokens * tokens * head_dim
        for block_m, block_n, warps, stages in configs:
            q_i8, q_scale = ia.quantize_per_block(q, block_m, multiplier=ia.LOG2E)
            k_i8, k_scale = ia.quantize_per_block(k, block_n)
            timing = _bench(functools.partial(
                ia.int8_attention_quantized, q_i8, q_scale, k_i8, k_scale, v, block_m=block_m,
                block_n=block_n, num_warps=warps, num_stages=stages,
            ))
            results.append(ConfigResult(
                head_dim=head_dim, block_m=block_m, block_n=block_n, num_warps=warps,
                num_stages=stages, current=ia._CONFIGS[head_dim] == (block_m, block_n, warps, stages),
                attn_only=timing, tflops=flops / (timing.median_ms * 1e-3) / 1e12,
            ))
    return results


def bench_groupnorm(shape, groups: int, dtype_name: str, layout: str) -> GroupNormResult:
    from genloop.kernels.groupnorm_silu import groupnorm_silu

    dtype = DTYPES[dtype_name]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(shape[1], device="cuda", dtype=dtype)
    bias = torch.randn(shape[1], device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    torch.testing.assert_close(
        groupnorm_silu(x, groups, weight, bias), F.silu(F.group_norm(x, groups, weight, bias)),
        atol=2e-2, rtol=2e-2,
    )
    t_torch = _bench(lambda: F.silu(F.group_norm(x, groups, weight, bias)))
    t_fused = _bench(lambda: groupnorm_silu(x, groups, weight, bias))
    t_copy = _bench(lambda: out.copy_(x))
    moved = 2.0 * x.numel() * x.element_size()

    def gbps(t: Timing) -> float:
        return moved / (t.median_ms * 1e-3) / 1e9

    return GroupNormResult(
        dtype=dtype_name, shape=shape, groups=groups, layout=layout, torch=t_torch,
        fused=t_fused, copy_baseline=t_copy, torch_gbps=gbps(t_torch), fused_gbps=gbps(t_fused),
        copy_gbps=gbps(t_copy), fused_fraction_of_copy=gbps(t_fused) / gbps(t_copy),
        speedup=t_torch.median_ms / t_fused.median_ms,
    )


def _fmt(t: Timing) -> str:
    return f"{t.median_ms:8.3f} [{t.p20_ms:.3f}-{t.p80_ms:.3f}]"


def render(report: Report) -> str:
    lines = [f"GPU: {report.gpu}  (torch {report.torch_version}, triton {report.triton_version})",
             "", "INT8 attention vs SDPA flash  (ms: median [p20-p80]; TFLOP/s on the median)"]
    lines.append(f"{'dtype':5} {'tokens':>6} {'D':>4} {'sdpa ms':>24} {'int8 ms':>24} "
                 f"{'sdpa TF':>8} {'int8 TF':>8} {'attn-only TF':>12} {'speedup':>8} {'cos':>8}")
    for r in report.attention:
        lines.append(
            f"{r.dtype:5} {r.tokens:6d} {r.head_dim:4d} {_fmt(r.sdpa):>24} {_fmt(r.int8):>24} "
            f"{r.sdpa_tflops:8.1f} {r.int8_tflops:8.1f} {r.int8_attn_only_tflops:12.1f} "
            f"{r.speedup:7.2f}x {r.cosine_vs_sdpa:8.5f}"
        )
    lines += ["", "Fused GroupNorm+SiLU vs torch group_norm + silu  (GB/s = 2 x bytes of x / median)"]
    lines.append(f"{'dtype':5} {'shape':>22} {'layout':>13} {'torch GB/s':>10} {'fused GB/s':>10} "
                 f"{'copy GB/s':>9} {'of copy':>7} {'speedup':>8}")
    for r in report.groupnorm:
        lines.append(
            f"{r.dtype:5} {r.shape!s:>22} {r.layout:>13} {r.torch_gbps:10.0f} "
            f"{r.fused_gbps:10.0f} {r.copy_gbps:9.0f} {r.fused_fraction_of_copy:6.0%} "
            f"{r.speedup:7.2f}x"
        )
    if report.sweep:
        lines += ["", "INT8 attention kernel alone, fp16, 4k tokens, by block config (* = in use)"]
        for c in report.sweep:
            mark = "*" if c.current else " "
            lines.append(
                f"{mark} D={c.head_dim:3d} BLOCK_M={c.block_m:3d} BLOCK_N={c.block_n:3d} "
                f"warps={c.num_warps:2d} stages={c.num_stages}  {_fmt(c.attn_only)} ms "
                f"{c.tflops:7.1f} TFLOP/s"
            )
    long = [r.speedup for r in report.attention if r.tokens >= 4096]
    fractions = [r.fused_fraction_of_copy for r in report.groupnorm]
    lines += ["", "Goals:"]
    if long:
        lines.append(f"  INT8 attention >= 1.8x SDPA at 4k+ tokens: min {min(long):.2f}x "
                     f"({'met' if min(long) >= 1.8 else 'NOT met'})")
    if fractions:
        lines.append(f"  GroupNorm+SiLU >= 70% of copy bandwidth: min {min(fractions):.0%} "
                     f"({'met' if min(fractions) >= 0.7 else 'NOT met'})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer shapes (a smoke run)")
    parser.add_argument("--sweep", action="store_true", help="also time other attention configs")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU (H100/H200 target); none is visible here. "
              "The kernels' correctness tests run on CPU: pytest tests/kernels", file=sys.stderr)
        return 2
    try:
        import triton
    except ImportError:
        print("benchmarks/kernels.py needs triton: pip install 'genloop[kernels]'", file=sys.stderr)
        return 2

    tokens = ATTENTION_TOKENS[:2] if args.quick else ATTENTION_TOKENS
    gn_shapes = GROUPNORM_SHAPES[:2] if args.quick else GROUPNORM_SHAPES
    attention = [
        bench_attention(n, d, name) for name in DTYPES for d in HEAD_DIMS for n in tokens
    ]
    groupnorm = [
        bench_groupnorm(shape[:4], shape[4], name, layout)
        for name in DTYPES for shape in gn_shapes for layout in ("nchw", "channels_last")
    ]
    report = Report(
        gpu=torch.cuda.get_device_name(), torch_version=torch.__version__,
        triton_version=triton.__version__, attention=attention, groupnorm=groupnorm,
        sweep=sweep_attention_configs() if args.sweep else [],
    )
    print(report.model_dump_json(indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
