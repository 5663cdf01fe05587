"""Benchmark of genloop's Triton kernels against PyTorch, for an H100/H200-class GPU.

    python benchmarks/kernel_speed.py                     # tables
    python benchmarks/kernel_speed.py --json              # one JSON object
    python benchmarks/kernel_speed.py --only attention    # or groupnorm
    python benchmarks/kernel_speed.py --device cpu --tiny # the plumbing, under Triton's interpreter

Every kernel output is checked against a float32 reference *before* it is timed; a shape whose
output misses the bound is reported with ``accurate: false`` and not timed, so a broken kernel
can never show up as a fast one.

INT8 attention runs on the shapes diffusers gives it (:data:`ATTENTION_SHAPES`): Q, K, V are
views of (B, N, heads x D) projections transposed to (B, heads, N, D), K carries the
per-channel offset diffusion models' keys have, and the table has self- and cross-attention
(77 text tokens) and ragged token counts (SD3/Flux joint attention: image + text tokens). It is
timed against three SDPA baselines: ``default`` (what diffusers calls; on Hopper with recent
cuDNN PyTorch may pick cuDNN attention), ``flash`` (FlashAttention-2) and ``cudnn``. TFLOP/s
count the 4·B·H·Nq·Nkv·D FLOPs of the two matmuls for every variant. ``dispatch`` says what
:func:`genloop.kernels.int8_attention_or_sdpa` would run on that shape. ``int8_quantize_only``
times the quantization launch alone (one of the kernel's two launches).

Fused GroupNorm+SiLU runs on UNet and VAE activation shapes, NCHW and channels-last: GB/s count
one read and one write of x (what the op must move), next to a plain copy of the same tensor as
the bandwidth ceiling. ``fused`` is what the kernel picks; ``fused_group`` (one launch, one
program per group) and ``fused_chunked`` (three launches) time both of its paths on every shape.

Times are ``triton.testing.do_bench`` medians (p20, p80 beside them) in ms. Goals (issue 23):
INT8 attention >= 1.3x default SDPA and >= 1.5x flash at 4k+ tokens with cosine >= 0.999;
GroupNorm+SiLU >= 85% of copy bandwidth on VAE shapes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

QUANTILES = [0.5, 0.2, 0.8]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
MIN_COSINE = 0.999
#: Channel offset of K (std), as diffusion models' keys carry; smoothing must remove it.
K_OFFSET_STD = 4.0


@dataclass(frozen=True)
class AttentionShape:
    name: str
    batch: int
    heads: int
    q_tokens: int
    kv_tokens: int
    head_dim: int


# SDXL at 1024 px (CFG batch 2): 64x64 latents at 10 heads x 64, 32x32 at 20 x 64, and the
# 77-token text cross-attention; SDXL at 2048 px; SD3 medium and Flux joint attention (image +
# text tokens, a ragged count) at 24 heads.
ATTENTION_SHAPES = [
    AttentionShape("sdxl-1024-self-64x64", 2, 10, 4096, 4096, 64),
    AttentionShape("sdxl-1024-cross-64x64", 2, 10, 4096, 77, 64),
    AttentionShape("sdxl-1024-self-32x32", 2, 20, 1024, 1024, 64),
    AttentionShape("sdxl-2048-self-128x128", 2, 10, 16384, 16384, 64),
    AttentionShape("sd3-1024-joint", 2, 24, 4429, 4429, 64),
    AttentionShape("flux-1024-joint", 1, 24, 4608, 4608, 128),
    AttentionShape("flux-2048-joint", 1, 24, 16896, 16896, 128),
]
TINY_ATTENTION_SHAPES = [
    AttentionShape("tiny-self", 1, 2, 200, 200, 64),
    AttentionShape("tiny-cross", 1, 2, 130, 77, 128),
]
# (N, C, H, W, groups): SDXL UNet at 1024 px (CFG batch 2) and the SD/SDXL VAE decoder at 1024 px.
GROUPNORM_SHAPES = [
    (2, 320, 128, 128, 32),
    (2, 640, 64, 64, 32),
    (2, 1280, 32, 32, 32),
    (1, 512, 128, 128, 32),
    (1, 512, 256, 256, 32),
    (1, 256, 512, 512, 32),
    (1, 128, 1024, 1024, 32),
]
VAE_GROUPNORM_SHAPES = GROUPNORM_SHAPES[3:]
TINY_GROUPNORM_SHAPES = [(1, 32, 20, 20, 8)]
GROUPNORM_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


@dataclass
class AttentionResult:
    shape: AttentionShape
    dtype: str
    dispatch: str
    cosine: float = float("nan")
    rel_l2: float = float("nan")
    accurate: bool = False
    baselines_cosine: dict[str, float] = field(default_factory=dict)
    timings: dict[str, Timing] = field(default_factory=dict)
    tflops: dict[str, float] = field(default_factory=dict)
    speedup: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class GroupNormResult:
    shape: tuple[int, int, int, int]
    groups: int
    dtype: str
    layout: str
    max_abs_error: float = float("nan")
    accurate: bool = False
    timings: dict[str, Timing] = field(default_factory=dict)
    gbps: dict[str, float] = field(default_factory=dict)
    fused_fraction_of_copy: float = float("nan")
    speedup: float = float("nan")
    auto_path: str = ""


def _bench(fn, device: str) -> Timing:
    if device.startswith("cuda"):
        from triton.testing import do_bench

        median, p20, p80 = do_bench(fn, warmup=25, rep=100, quantiles=QUANTILES)
        return Timing(median, p20, p80)
    times = []
    for _ in range(3):  # CPU: only to exercise the plumbing; the numbers mean nothing
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return Timing(statistics.median(times), min(times), max(times))


def diffusers_qkv(shape: AttentionShape, dtype: torch.dtype, device: str, seed: int = 0):
    """q, k, v as diffusers' ``AttnProcessor2_0`` hands them to SDPA: (B, N, H*D) projections
    viewed as (B, H, N, D) (strided, not contiguous), K with a per-channel offset."""
    g = torch.Generator(device=device).manual_seed(seed)
    b, h, d = shape.batch, shape.heads, shape.head_dim

    def proj(n: int, offset: torch.Tensor | None = None) -> torch.Tensor:
        x = torch.randn((b, n, h * d), generator=g, device=device, dtype=torch.float32)
        if offset is not None:
            x = x + offset
        return x.to(dtype).view(b, n, h, d).transpose(1, 2)

    offset = K_OFFSET_STD * torch.randn((h * d,), generator=g, device=device)
    return proj(shape.q_tokens), proj(shape.kv_tokens, offset), proj(shape.kv_tokens)


def _compare(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    o, r = out.float().flatten(), ref.float().flatten()
    if not torch.isfinite(o).all():
        return float("nan"), float("nan")
    cos = F.cosine_similarity(o, r, dim=0).item()
    return cos, ((o - r).norm() / r.norm()).item()


def bench_attention(shape: AttentionShape, dtype_name: str, device: str) -> AttentionResult:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from genloop.kernels import dispatch
    from genloop.kernels.int8_attention import _CONFIGS, int8_attention, quantize_qk

    dtype = DTYPES[dtype_name]
    q, k, v = diffusers_qkv(shape, dtype, device)
    reason = dispatch.int8_attention_blocker(q, k, v)
    result = AttentionResult(shape, dtype_name, dispatch=reason or "int8 kernel")
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())

    def sdpa(backend=None):
        def run():
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v)
        return run

    variants = {"int8": lambda: int8_attention(q, k, v), "sdpa_default": sdpa()}
    block_m, block_n, _, _ = _CONFIGS[shape.head_dim]
    # The quantization launch alone (Q blocks, K's mean and blocks): what a short-key call
    # (77 text tokens) pays on top of the attention kernel.
    quantize = lambda: quantize_qk(q, k, block_m=block_m, block_n=block_n,  # noqa: E731
                                   q_multiplier=1.0)
    if device.startswith("cuda"):
        variants["sdpa_flash"] = sdpa(SDPBackend.FLASH_ATTENTION)
        variants["sdpa_cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    # Accuracy first: each variant against the float32 reference, before any timing.
    runnable = {}
    for name, fn in variants.items():
        try:
            cos, rel = _compare(fn(), ref)
        except Exception as exc:  # noqa: BLE001  (a backend that does not take the shape)
            result.errors[name] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if name == "int8":
            result.cosine, result.rel_l2 = cos, rel
            result.accurate = cos >= MIN_COSINE
            if not result.accurate:
                result.errors[name] = f"cosine {cos:.5f} < {MIN_COSINE}: not timed"
                continue
        else:
            result.baselines_cosine[name] = cos
        runnable[name] = fn
    del ref
    flops = 4.0 * shape.batch * shape.heads * shape.q_tokens * shape.kv_tokens * shape.head_dim
    for name, fn in runnable.items():
        t = _bench(fn, device)
        result.timings[name] = t
        result.tflops[name] = flops / (t.median_ms * 1e-3) / 1e12
    if "int8" in result.timings:
        result.timings["int8_quantize_only"] = _bench(quantize, device)
        for name, t in result.timings.items():
            if not name.startswith("int8"):
                result.speedup[name] = t.median_ms / result.timings["int8"].median_ms
    return result


def bench_groupnorm(shape, groups: int, dtype_name: str, layout: str,
                    device: str) -> GroupNormResult:
    from genloop.kernels.groupnorm_silu import group_path_fits, groupnorm_silu

    dtype = DTYPES[dtype_name]
    g = torch.Generator(device=device).manual_seed(0)
    x = (torch.randn(shape, generator=g, device=device) * 3 + 1).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(shape[1], generator=g, device=device).to(dtype)
    bias = torch.randn(shape[1], generator=g, device=device).to(dtype)
    result = GroupNormResult(tuple(shape), groups, dtype_name, layout)
    result.auto_path = ("group" if group_path_fits(shape[2] * shape[3], shape[1] // groups)
                        else "chunked")
    ref = F.silu(F.group_norm(x.float(), groups, weight.float(), bias.float()))
    errors = []
    for path in ("group", "chunked"):
        out = groupnorm_silu(x, groups, weight, bias, path=path)
        errors.append(((out.float() - ref).abs() / (1 + ref.abs())).max().item())
        del out
    result.max_abs_error = max(errors)
    result.accurate = result.max_abs_error <= GROUPNORM_TOLERANCE[dtype]
    del ref
    if not result.accurate:
        return result
    copy_out = torch.empty_like(x)
    result.timings = {
        "torch": _bench(lambda: F.silu(F.group_norm(x, groups, weight, bias)), device),
        "fused": _bench(lambda: groupnorm_silu(x, groups, weight, bias), device),
        # Both paths on every shape: the data to place GROUP_PATH_MAX_ELEMENTS.
        "fused_group": _bench(lambda: groupnorm_silu(x, groups, weight, bias, path="group"),
                              device),
        "fused_chunked": _bench(
            lambda: groupnorm_silu(x, groups, weight, bias, path="chunked"), device),
        "copy": _bench(lambda: copy_out.copy_(x), device),
    }
    moved = 2.0 * x.numel() * x.element_size()
    result.gbps = {k: moved / (t.median_ms * 1e-3) / 1e9 for k, t in result.timings.items()}
    result.fused_fraction_of_copy = result.gbps["fused"] / result.gbps["copy"]
    result.speedup = result.timings["torch"].median_ms / result.timings["fused"].median_ms
    return result


def goals(attention: list[AttentionResult], groupnorm: list[GroupNormResult]) -> dict:
    """The issue's goals, measured: min speedups at 4k+ tokens, min GroupNorm copy fraction."""
    long = [r for r in attention if r.shape.q_tokens >= 4096 and r.shape.kv_tokens >= 4096]
    vae = [r for r in groupnorm if r.shape[0] == 1 and r.shape[2] >= 128 and r.accurate]

    def low(values):
        values = [v for v in values if v is not None and not math.isnan(v)]
        return min(values) if values else None

    return {
        "int8_all_accurate": all(r.accurate for r in attention),
        "int8_min_cosine": low([r.cosine for r in attention]),
        "int8_vs_sdpa_default_min_4k": low([r.speedup.get("sdpa_default") for r in long]),
        "int8_vs_flash_min_4k": low([r.speedup.get("sdpa_flash") for r in long]),
        "int8_vs_cudnn_min_4k": low([r.speedup.get("sdpa_cudnn") for r in long]),
        "groupnorm_all_accurate": all(r.accurate for r in groupnorm),
        "groupnorm_vae_min_fraction_of_copy": low([r.fused_fraction_of_copy for r in vae]),
    }


def render(report: dict) -> str:
    lines = [f"{report['gpu']}  (torch {report['torch']}, triton {report['triton']})"]
    if report["attention"]:
        lines += ["", "INT8 attention (ms median; speedup = baseline / int8; cos vs fp32)"]
        for r in report["attention"]:
            t = r["timings"]
            cells = " ".join(f"{k}={v['median_ms']:.3f}" for k, v in t.items())
            sp = " ".join(f"x{v:.2f}:{k[5:]}" for k, v in r["speedup"].items())
            lines.append(f"{r['dtype']} {r['shape']['name']:24} cos={r['cosine']:.5f} {cells} "
                         f"{sp} [{r['dispatch']}] {r['errors'] or ''}")
    if report["groupnorm"]:
        lines += ["", "GroupNorm+SiLU (GB/s; fraction of copy)"]
        for r in report["groupnorm"]:
            g = r["gbps"]
            lines.append(f"{r['dtype']} {r['shape']!s:22} {r['layout']:13} "
                         f"err={r['max_abs_error']:.1e} torch={g.get('torch', 0):.0f} "
                         f"fused={g.get('fused', 0):.0f} ({r['auto_path']}; "
                         f"group={g.get('fused_group', 0):.0f} "
                         f"chunked={g.get('fused_chunked', 0):.0f}) "
                         f"copy={g.get('copy', 0):.0f} ({r['fused_fraction_of_copy']:.0%})")
    lines += ["", "Goals: " + json.dumps(report["goals"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", choices=("attention", "groupnorm"), default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true",
                        help="two tiny shapes each (for --device cpu: checks the plumbing)")
    parser.add_argument("--dtypes", default="fp16,bf16")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("benchmarks/kernel_speed.py --device cuda needs a CUDA GPU; none is visible. On CPU: "
              "TRITON_INTERPRET=1 python benchmarks/kernel_speed.py --device cpu --tiny",
              file=sys.stderr)
        return 2
    import triton

    dtypes = args.dtypes.split(",")
    attention, groupnorm = [], []
    if args.only in (None, "attention"):
        shapes = TINY_ATTENTION_SHAPES if args.tiny else ATTENTION_SHAPES
        attention = [bench_attention(s, d, args.device) for d in dtypes for s in shapes]
    if args.only in (None, "groupnorm"):
        shapes = TINY_GROUPNORM_SHAPES if args.tiny else GROUPNORM_SHAPES
        groupnorm = [bench_groupnorm(s[:4], s[4], d, layout, args.device)
                     for d in dtypes for s in shapes for layout in ("nchw", "channels_last")]
    report = {
        "gpu": (torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"),
        "torch": torch.__version__, "triton": triton.__version__,
        "attention": [asdict(r) for r in attention], "groupnorm": [asdict(r) for r in groupnorm],
        "goals": goals(attention, groupnorm),
    }
    print(json.dumps(report, indent=1) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
