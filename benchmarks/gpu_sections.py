"""The in-process sections of ``benchmarks/gpu_check.py``, one per subprocess.

    python benchmarks/gpu_sections.py SECTION --device cuda --out FILE.json [--tiny]

Each section writes one JSON object to ``--out``; ``gpu_check.py`` runs each in its own process
so that a dead CUDA context, a hang or a crash costs that section only.

* ``env``: GPU, versions, the two ceilings (device copy GB/s, bf16 matmul TFLOP/s).
* ``unet``: a UNet2DConditionModel with SDXL's config and random weights, fp16, with and
  without the kernels: PSNR of the noise prediction, how many attention / GroupNorm calls ran
  the kernels, ms per forward.
* ``transformers``: SD3-medium- and Flux-dev-shaped transformers (full width, a few layers,
  random weights) at 1024 px: diffusers' stock processors with their SDPA call sent to INT8
  attention (``Int8AttnProcessor``, forced) against the same processors unwrapped (PSNR,
  kernel calls, ms per forward) and what dispatch picks unforced.
* ``engine``: the generation engine on ``shapes`` in fp16: batching to the cap, DeepCache PSNR
  (steps counted on the host), an injected and a real out-of-memory split, eviction freeing
  memory.
* ``compile``: regional ``torch.compile`` of ``shapes`` with batch buckets (a batch of 3 reuses
  the code compiled for 4), PSNR against eager, then ``reduce-overhead`` (CUDA graphs) with
  DeepCache. Writes its JSON after every stage: compiling may eat the section's time.
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
# Full width, few layers (SD3 medium has 24 joint blocks, Flux dev 19 double + 38 single).
SD3_TRANSFORMER = dict(
    sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=4,
    attention_head_dim=64, num_attention_heads=24, joint_attention_dim=4096,
    caption_projection_dim=1536, pooled_projection_dim=2048, pos_embed_max_size=192,
)
FLUX_TRANSFORMER = dict(
    patch_size=1, in_channels=64, num_layers=2, num_single_layers=4, attention_head_dim=128,
    num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
    guidance_embeds=True, axes_dims_rope=(16, 56, 56),
)
TINY_SD3 = dict(sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=1,
                attention_head_dim=64, num_attention_heads=1, joint_attention_dim=32,
                caption_projection_dim=64, pooled_projection_dim=32, pos_embed_max_size=16)
TINY_FLUX = dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                 attention_head_dim=64, num_attention_heads=1, joint_attention_dim=32,
                 pooled_projection_dim=32, guidance_embeds=True, axes_dims_rope=(16, 24, 24))
MIN_UNET_PSNR_DB = 40.0
MIN_DEEPCACHE_PSNR_DB = 30.0
MIN_COMPILE_PSNR_DB = 40.0


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
    _ORIGINALS.setdefault("attn", attn_blocker)
    _ORIGINALS.setdefault("gn", gn_blocker)
    return attn, gn


_ORIGINALS: dict = {}


def _restore_dispatch(dispatch) -> None:
    dispatch.int8_attention_blocker = _ORIGINALS.pop("attn", dispatch.int8_attention_blocker)
    dispatch.groupnorm_silu_blocker = _ORIGINALS.pop("gn", dispatch.groupnorm_silu_blocker)


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


def _transformer_inputs(name: str, cfg: dict, tiny: bool, device: str, dtype) -> dict:
    g = torch.Generator(device=device).manual_seed(1)

    def randn(*shape):
        return torch.randn(shape, generator=g, device=device).to(dtype)

    text = 8 if tiny else (333 if name == "sd3" else 512)
    context = randn(1 if name == "flux" else 2, text, cfg["joint_attention_dim"])
    batch = context.shape[0]
    pooled = randn(batch, cfg["pooled_projection_dim"])
    if name == "sd3":
        size = cfg["sample_size"]
        return dict(hidden_states=randn(batch, cfg["in_channels"], size, size),
                    encoder_hidden_states=context, pooled_projections=pooled,
                    timestep=torch.full((batch,), 500.0, device=device))
    side = 4 if tiny else 64  # 1024 px: 128 x 128 latents packed 2 x 2
    ids = torch.zeros(side, side, 3, device=device)
    ids[..., 1] = torch.arange(side, device=device)[:, None]
    ids[..., 2] = torch.arange(side, device=device)[None, :]
    return dict(hidden_states=randn(batch, side * side, cfg["in_channels"]),
                encoder_hidden_states=context, pooled_projections=pooled,
                timestep=torch.full((batch,), 0.5, device=device), img_ids=ids.reshape(-1, 3),
                txt_ids=torch.zeros(text, 3, device=device),
                guidance=torch.full((batch,), 3.5, device=device))


def transformers(device: str, tiny: bool) -> dict:
    from diffusers import FluxTransformer2DModel, SD3Transformer2DModel

    models = {"sd3": (SD3Transformer2DModel, TINY_SD3 if tiny else SD3_TRANSFORMER,
                      torch.float16),
              "flux": (FluxTransformer2DModel, TINY_FLUX if tiny else FLUX_TRANSFORMER,
                       torch.bfloat16)}
    out: dict = {}
    for name, (cls, cfg, dtype) in models.items():
        torch.manual_seed(0)
        with torch.device(device):
            model = cls(**cfg).eval().to(dtype)
        out[name] = _transformer(name, model, cfg, dtype, device, tiny)
        _save_partial(out)
        del model
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def _transformer(name: str, model, cfg: dict, dtype, device: str, tiny: bool) -> dict:
    import genloop.kernels as gk
    from genloop.kernels import dispatch

    cuda = device.startswith("cuda")
    inputs = _transformer_inputs(name, cfg, tiny, device, dtype)
    reps = 1 if tiny else 5
    r: dict = {"dtype": str(dtype),
               "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
               "tokens": (inputs["hidden_states"].shape[1] if name == "flux"
                          else (cfg["sample_size"] // cfg["patch_size"]) ** 2)}

    def forward():
        with torch.inference_mode():
            return model(**inputs).sample

    def timed():
        forward()
        _sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            forward()
        _sync(device)
        return (time.perf_counter() - t) / reps * 1e3

    plain = forward().float()
    r["stock_ms"] = timed()
    r["modules"] = gk.apply_int8_attention(model, force=not cuda)
    calls, _ = _count_dispatch(dispatch)
    try:
        forward()
        r["dispatch_unforced"] = dict(calls)
        if cuda:
            r["dispatch_ms"] = timed()
            gk.apply_int8_attention(model, force=True)
        calls.clear()
        forced = forward().float()
        r["forced_calls"] = dict(calls)
    finally:
        _restore_dispatch(dispatch)
    r["forced_vs_stock_psnr_db"] = psnr(forced, plain)
    r["forced_ms"] = timed()
    r["speedup_forced"] = r["stock_ms"] / r["forced_ms"]
    r["finite"] = bool(torch.isfinite(forced).all())
    r["ok"] = r["finite"] and r["forced_vs_stock_psnr_db"] >= MIN_UNET_PSNR_DB
    return r


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
    from genloop.workers.engine.deepcache import deepcache_stats

    # Steps are counted on the host from the step callback: cached calls > 0 shows the
    # schedule ran without reading the timestep on the GPU.
    full, skipped = deepcache_stats(registry.pipeline(model).unet)
    out["deepcache"] = {"psnr_min_db": min(values), "psnr_median_db": sorted(values)[cap // 2],
                        "seconds": secs, "images_per_s": cap / secs, "batches": batches,
                        "full_calls": full, "cached_calls": skipped,
                        "ok": min(values) >= MIN_DEEPCACHE_PSNR_DB and skipped > 0}
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


def compile_section(device: str, tiny: bool) -> dict:
    """Batch buckets (3 runs on the code compiled for 4), PSNR against eager, then CUDA graphs
    (``reduce-overhead``) with DeepCache; the JSON is written after every stage."""
    from torch._dynamo.utils import counters

    from genloop.workers.engine.compile import Compiler, bucket
    from genloop.workers.engine.generate import ImageSettings, call_pipeline
    from genloop.workers.engine.registry import ModelRegistry
    from genloop.workers.engine.step_cache import prepare_step_cache

    cuda = device.startswith("cuda")
    model = "tiny" if tiny else "shapes"
    registry = ModelRegistry(device)
    pipe = registry.pipeline(model)
    d = registry.defaults(model)
    steps = 4 if tiny else d.steps
    prompts = [f"a blue square number {i}" for i in range(4)]
    out: dict = {"model": model, "backend": "eager" if not cuda else "inductor",
                 "buckets": {n: bucket(2 * n) for n in (3, 4)}}  # 2x: classifier-free guidance

    def images(n: int, cache: str = "off", compiler: Compiler | None = None):
        settings = ImageSettings(steps=steps, guidance=d.guidance, width=d.width,
                                 height=d.height, cache=cache)

        def run():
            prepare_step_cache(pipe, cache, steps)
            return call_pipeline(pipe, prompts[:n], list(range(n)), settings)

        _sync(device)
        t = time.perf_counter()
        result = compiler.call(pipe, (n, d.width, d.height), run) if compiler else run()
        _sync(device)
        return result, time.perf_counter() - t

    def graphs() -> int:
        return int(counters["stats"]["unique_graphs"])

    images(1)  # warm-up: lazy initialisation, not counted
    eager4, out["eager_4_s"] = images(4)
    eager3, _ = images(3)
    eager_dc, out["eager_deepcache_4_s"] = images(4, "deepcache")
    _save_partial(out)
    compiler = Compiler(backend="inductor" if cuda else "eager")
    out["regions"] = compiler.apply(pipe) and len(compiler._compiled[pipe.unet])
    before = graphs()
    compiled4, out["first_call_4_s"] = images(4, compiler=compiler)
    out["graphs_after_4"] = graphs() - before
    _save_partial(out)
    compiled3, out["call_3_s"] = images(3, compiler=compiler)
    out["new_graphs_for_3"] = graphs() - before - out["graphs_after_4"]
    _, out["steady_4_s"] = images(4, compiler=compiler)
    out["speedup_vs_eager_4"] = out["eager_4_s"] / out["steady_4_s"]
    out["psnr_min_db"] = min(_images_psnr(compiled4, eager4) + _images_psnr(compiled3, eager3))
    out["failed"] = {type(k).__name__: v for k, v in compiler.failed.items()}
    out["ok"] = (out["new_graphs_for_3"] == 0 and not out["failed"]
                 and out["psnr_min_db"] >= MIN_COMPILE_PSNR_DB)
    _save_partial(out)
    compiler.remove(pipe)
    if cuda:  # CUDA graphs replay into the same buffers DeepCache keeps across steps
        torch._dynamo.reset()
        graphs_compiler = Compiler(backend="inductor", mode="reduce-overhead")
        graphs_compiler.apply(pipe)
        r: dict = {}
        try:
            _, r["first_call_s"] = images(4, "deepcache", graphs_compiler)
            cached, r["steady_s"] = images(4, "deepcache", graphs_compiler)
            r["psnr_min_vs_eager_deepcache_db"] = min(_images_psnr(cached, eager_dc))
            r["speedup_vs_eager_deepcache"] = out["eager_deepcache_4_s"] / r["steady_s"]
            r["ok"] = r["psnr_min_vs_eager_deepcache_db"] >= MIN_COMPILE_PSNR_DB
        except Exception as exc:  # noqa: BLE001  (the figure is what failed)
            r["error"] = f"{type(exc).__name__}: {exc}"[:300]
        r["failed"] = {type(k).__name__: v for k, v in graphs_compiler.failed.items()}
        out["reduce_overhead_deepcache"] = r
    return out


_PARTIAL_PATH: list[str] = []


def _save_partial(result: dict) -> None:
    """Write what a section has so far (a section killed at its timeout keeps it)."""
    if _PARTIAL_PATH:
        with open(_PARTIAL_PATH[0], "w") as f:
            json.dump(result, f, indent=1, default=str)


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


SECTIONS = {"env": env, "unet": unet, "transformers": transformers, "engine": engine,
            "compile": compile_section}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("section", choices=sorted(SECTIONS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    _PARTIAL_PATH.append(args.out)
    result = SECTIONS[args.section](args.device, args.tiny)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
