"""The in-process sections of ``benchmarks/gpu_check.py``, one per subprocess.

    python benchmarks/gpu_sections.py SECTION --device cuda --out FILE.json [--tiny]

Each section writes one JSON object to ``--out``; ``gpu_check.py`` runs each in its own process
so that a dead CUDA context, a hang or a crash costs that section only.

* ``env``: GPU, versions, the two ceilings (device copy GB/s, bf16 matmul TFLOP/s).
* ``unet``: a UNet2DConditionModel with SDXL's config and random weights, fp16, with and
  without the kernels: PSNR of the noise prediction, how many attention / GroupNorm calls ran
  the kernels, ms per forward.
* ``engine``: the generation engine on ``shapes`` in fp16: batching to the cap, DeepCache PSNR,
  an injected and a real out-of-memory split, eviction freeing memory.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
import weakref
from collections import Counter

import torch

SDXL_UNET = dict(
    sample_size=128, in_channels=4, out_channels=4, layers_per_block=2,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    block_out_channels=(320, 640, 1280), transformer_layers_per_block=(1, 2, 10),
    attention_head_dim=(5, 10, 20), cross_attention_dim=2048, use_linear_projection=True,
    addition_embed_type="text_time", addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816, norm_num_groups=32,
)
# Two levels, head_dim 64 at both (1 head of 64, then 2 of 64): the kernels engage under --tiny.
TINY_UNET = dict(
    sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), block_out_channels=(64, 128),
    cross_attention_dim=64, attention_head_dim=1, norm_num_groups=2,
)
MIN_UNET_PSNR_DB = 40.0
MIN_DEEPCACHE_PSNR_DB = 30.0


def psnr(out: torch.Tensor, ref: torch.Tensor) -> float:
    """PSNR in dB of ``out`` against ``ref``, with ref's range as the peak."""
    out, ref = out.double(), ref.double()
    mse = ((out - ref) ** 2).mean().item()
    peak = (ref.max() - ref.min()).item()
    if not math.isfinite(mse):
        return float("nan")
    return 200.0 if mse == 0 else 10 * math.log10(peak**2 / mse)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def env(device: str, tiny: bool) -> dict:
    import platform

    out: dict = {"python": platform.python_version(), "torch": torch.__version__,
                 "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    for name in ("triton", "diffusers", "transformers", "pydantic", "open_clip", "numpy"):
        try:
            out[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001
            out[name] = f"missing: {type(exc).__name__}"
    if not device.startswith("cuda"):
        return out
    from triton.testing import do_bench

    props = torch.cuda.get_device_properties(0)
    out.update(gpu=props.name, capability=list(torch.cuda.get_device_capability()),
               sms=props.multi_processor_count, memory_gib=props.total_memory / 2**30)
    out["copy_gbps"] = _copy_gbps(device, do_bench)
    a, b = (torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(2))
    ms = do_bench(lambda: a @ b, warmup=25, rep=100)
    out["bf16_matmul_tflops"] = 2 * 8192**3 / (ms * 1e-3) / 1e12
    return out


def _copy_gbps(device: str, do_bench) -> float:
    src = torch.randn(1 << 30, device=device, dtype=torch.bfloat16)  # 2 GiB: far past the L2
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=100)
    return 2 * src.numel() * 2 / (ms * 1e-3) / 1e9


def _count_dispatch(dispatch) -> tuple[Counter, Counter]:
    """Wrap the dispatch blockers so the run counts kernel calls and fallback reasons."""
    attn, gn = Counter(), Counter()
    attn_blocker, gn_blocker = dispatch.int8_attention_blocker, dispatch.groupnorm_silu_blocker

    def counted_attn(*args, **kwargs):
        reason = attn_blocker(*args, **kwargs)
        attn["kernel" if reason is None else reason[:80]] += 1
        return reason

    def counted_gn(*args, **kwargs):
        reason = gn_blocker(*args, **kwargs)
        gn["kernel" if reason is None else reason[:80]] += 1
        return reason

    dispatch.int8_attention_blocker, dispatch.groupnorm_silu_blocker = counted_attn, counted_gn
    return attn, gn


def unet(device: str, tiny: bool) -> dict:
    from diffusers import UNet2DConditionModel

    import genloop.kernels as gk
    from genloop.kernels import dispatch

    cfg = TINY_UNET if tiny else SDXL_UNET
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(device):  # random init on the GPU: seconds, not minutes on the CPU
        model = UNet2DConditionModel(**cfg).eval()
    out: dict = {"config": "tiny" if tiny else "sdxl", "dtype": str(dtype),
                 "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
                 "build_s": time.perf_counter() - t0}
    batch, size = 2, cfg["sample_size"]
    g = torch.Generator(device=device).manual_seed(1)
    sample = torch.randn((batch, 4, size, size), generator=g, device=device)
    ctx = torch.randn((batch, 77, cfg["cross_attention_dim"]), generator=g, device=device)
    kwargs: dict = {}
    if cfg.get("addition_embed_type") == "text_time":
        kwargs["added_cond_kwargs"] = {
            "text_embeds": torch.randn((batch, 1280), generator=g, device=device),
            "time_ids": torch.tensor([[1024, 1024, 0, 0, 1024, 1024]] * batch, device=device,
                                     dtype=torch.float32)}

    def forward(m, dt):
        args = {k: ({kk: vv.to(dt) for kk, vv in v.items()} if isinstance(v, dict) else v)
                for k, v in kwargs.items()}
        with torch.inference_mode():
            return m(sample.to(dt), 500, encoder_hidden_states=ctx.to(dt), **args).sample

    reps = 1 if tiny else 5

    def timed(m, dt):
        forward(m, dt)
        _sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            forward(m, dt)
        _sync(device)
        return (time.perf_counter() - t) / reps * 1e3

    ref32 = forward(model, torch.float32).float()
    model.to(dtype)
    plain = forward(model, dtype).float()
    out["plain_vs_fp32_psnr_db"] = psnr(plain, ref32)
    out["plain_ms"] = timed(model, dtype)
    force = not device.startswith("cuda")  # CPU: the interpreter, on any shape
    out["attention_modules"] = gk.apply_int8_attention(model, force=force)
    out["groupnorms_fused"] = gk.apply_fused_groupnorm_silu(model, force=force)
    attn_calls, gn_calls = _count_dispatch(dispatch)
    fused = forward(model, dtype).float()
    out["attention_calls"], out["groupnorm_calls"] = dict(attn_calls), dict(gn_calls)
    out["kernels_vs_plain_psnr_db"] = psnr(fused, plain)
    out["kernels_vs_fp32_psnr_db"] = psnr(fused, ref32)
    out["kernels_ms"] = timed(model, dtype)
    out["speedup"] = out["plain_ms"] / out["kernels_ms"]
    out["finite"] = bool(torch.isfinite(fused).all() and torch.isfinite(plain).all())
    out["ok"] = out["finite"] and out["kernels_vs_plain_psnr_db"] >= MIN_UNET_PSNR_DB
    return out


def _images_psnr(a: list, b: list) -> list[float]:
    import numpy as np

    out = []
    for x, y in zip(a, b, strict=True):
        mse = float(((np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** 2).mean())
        out.append(100.0 if mse == 0 else min(100.0, 10 * math.log10(255.0**2 / mse)))
    return out


def engine(device: str, tiny: bool) -> dict:
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.generate import ImageSettings
    from genloop.workers.engine.oom import OomGuard
    from genloop.workers.engine.registry import ModelRegistry
    from genloop.workers.engine.residency import pipeline_bytes

    cuda = device.startswith("cuda")
    model = "tiny" if tiny else "shapes"
    cap = 4 if tiny else 16
    registry = ModelRegistry(device, engine_options=EngineOptions(max_batch=cap))
    eng = registry.engine
    d = registry.defaults(model)
    steps = 4 if tiny else d.steps
    base = dict(steps=steps, guidance=d.guidance, width=d.width, height=d.height)
    out: dict = {"model": model, "dtype": str(registry.dtype), "cap": cap}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before_load = torch.cuda.memory_allocated()
    prompts = [f"a red circle number {i}" for i in range(cap)]
    seeds = list(range(cap))

    def run(cache: str, n: int = cap, **size) -> tuple[list, list[int], float]:
        settings = ImageSettings(**{**base, **size, "cache": cache})
        first = len(eng.batcher.batches)
        _sync(device)
        t = time.perf_counter()
        jobs = [eng.submit(model, [p], [s], settings) for p, s in zip(prompts[:n], seeds[:n],
                                                                       strict=True)]
        images = [j.future.result(timeout=300)[0] for j in jobs]
        _sync(device)
        return images, eng.batcher.batches[first:], time.perf_counter() - t

    run("off", 2)  # warm-up: lazy initialisation
    off, batches, secs = run("off")
    out["batching"] = {"batches": batches, "seconds": secs, "images_per_s": cap / secs,
                       "reached_cap": max(batches) == cap}
    if cuda:
        out["resident_bytes_estimate"] = pipeline_bytes(registry.pipeline(model))
        out["allocated_after_load"] = torch.cuda.memory_allocated() - before_load
    cached, batches, secs = run("deepcache")
    values = _images_psnr(cached, off)
    out["deepcache"] = {"psnr_min_db": min(values), "psnr_median_db": sorted(values)[cap // 2],
                        "seconds": secs, "images_per_s": cap / secs,
                        "ok": min(values) >= MIN_DEEPCACHE_PSNR_DB}
    out["nan_free"] = all(img.getextrema() != ((0, 0), (0, 0), (0, 0)) for img in off)

    # Injected OOM: every batch above 4 "runs out"; the engine must split down and learn 4.
    eng.oom = OomGuard()
    eng.oom.inject = lambda key, n: n > max(1, cap // 4)
    injected, batches, secs = run("off")
    out["injected_oom"] = {
        "batches": batches, "learned_cap": eng.oom.limit((model, d.width, d.height)),
        "psnr_min_vs_unsplit_db": min(_images_psnr(injected, off)), "seconds": secs}
    eng.oom = OomGuard()

    if cuda:
        out["real_oom"] = _real_oom(run, eng, model, device)
    # Eviction: the pipeline object must die and its memory come back.
    ref = weakref.ref(registry.pipeline(model))
    held = torch.cuda.memory_allocated() if cuda else 0
    eng.close()
    out["evicted"] = registry.evict(model)
    gc.collect()
    out["pipeline_collected"] = ref() is None
    if cuda:
        torch.cuda.empty_cache()
        out["freed_bytes_on_evict"] = held - torch.cuda.memory_allocated()
        out["freed_fraction_of_estimate"] = (out["freed_bytes_on_evict"]
                                             / max(1, out["resident_bytes_estimate"]))
    return out


def _real_oom(run, eng, model: str, device: str) -> dict:
    """Cap the process's CUDA memory just above one large candidate's need and ask for many:
    real OOMs must split the batch down (and free the failed batch's memory each time)."""
    from genloop.workers.engine.oom import OomGuard

    size = {"width": 512, "height": 512}
    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run("off", 1, **size)
    one = torch.cuda.max_memory_allocated() - base
    total = torch.cuda.get_device_properties(0).total_memory
    limit = base + 3 * one + (256 << 20)
    eng.oom = OomGuard()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))
    try:
        images, batches, secs = run("off", 16, **size)
        ok = len(images) == 16
        err = None
    except Exception as exc:  # noqa: BLE001
        batches, secs, ok, err = [], 0.0, False, f"{type(exc).__name__}: {exc}"[:300]
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    learned = eng.oom.limit((model, 512, 512))
    eng.oom = OomGuard()
    return {"one_candidate_bytes": one, "limit_bytes": limit, "batches": batches,
            "learned_cap": learned, "all_delivered": ok, "seconds": secs, "error": err,
            "allocated_after": torch.cuda.memory_allocated() - base}


SECTIONS = {"env": env, "unet": unet, "engine": engine}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=sorted(SECTIONS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    result = SECTIONS[args.section](args.device, args.tiny)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
