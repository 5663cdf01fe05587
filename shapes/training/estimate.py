"""How long the full retraining takes on this machine, from a few timed steps of every stage.

Times are CPU seconds of the calling thread (``time.thread_time``), so other jobs on a shared
machine do not inflate them; on CUDA, wall seconds with the device synchronised around each
timing. The extrapolation assumes what :mod:`.train` does on a 2-core CPU: generator and clean
CLIP in parallel (one core each), then mining and fine-tuning, counted at one thread (their
second thread is a bonus not claimed here). ``--recipe gpu --budget-seconds S`` also says how
many steps each budgeted loop would run in ``S`` seconds.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

#: Share of a training budget for the first phase (generator beside clean CLIP); mining (a
#: fixed number of images) and the hard-negative fine-tuning share the rest.
FIRST_PHASE_SHARE = 0.75


class Estimate(BaseModel):
    #: CPU seconds per unit: a training step, an image rendered / encoded / generated / graded.
    per_unit: dict[str, float]
    #: Extrapolated CPU seconds of each stage of the full run.
    stages: dict[str, float]
    total_minutes: float
    #: With ``budget_seconds``: the steps each budgeted loop would run in it (see :mod:`.train`).
    budgeted_steps: dict[str, int] | None = None


def _timed(fn: Callable[[], object], repeat: int, device: str = "cpu") -> float:
    from .steps import is_cuda, synchronize

    clock = time.perf_counter if is_cuda(device) else time.thread_time
    fn()  # warm-up: first calls allocate and pick kernels
    synchronize(device)
    start = clock()
    for _ in range(repeat):
        fn()
    synchronize(device)
    return (clock() - start) / repeat


def _per_step(run: Callable[[int], object], device: str = "cpu", extra: int = 2) -> float:
    """Seconds per step of ``run(steps)``, its fixed costs (building, saving) cancelled out."""
    if device != "cpu":
        extra *= 10  # a GPU step is short: time more of them
    return (_timed(lambda: run(1 + extra), 1, device) - _timed(lambda: run(1), 1, device)) / extra


def estimate(device: str = "cpu", repeat: int = 2, recipe: str = "cpu",
             budget_seconds: float | None = None) -> Estimate:
    """Measure each stage on this machine and extrapolate the default configuration."""
    import numpy as np

    from genloop.shapes.dataset import render_pool
    from genloop.shapes.models import build_tokenizer

    from . import train_clip, train_sd
    from .mining import Mined, MiningConfig, generate, verdicts

    sd = train_sd.SDTrainConfig.gpu() if recipe == "gpu" else train_sd.SDTrainConfig()
    clip, mining = train_clip.ClipTrainConfig(), MiningConfig()
    unit: dict[str, float] = {}
    unit["render"] = _timed(lambda: render_pool(range(64)), repeat) / 64
    pool, captions = render_pool(range(256))
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
        def vae_run(n: int):
            return train_sd.train_vae(sd.model_copy(update={"vae_steps": n, "warmup": 1}),
                                      pool, device)

        unit["vae_step"] = _per_step(vae_run, device)
        vae = vae_run(1)
        unit["encode"] = _timed(
            lambda: train_sd.encode_pool(vae, tokenizer, pool[:64], captions[:64], device),
            repeat, device) / 64
        one_unet = sd.model_copy(update={"unet_steps": 1, "warmup": 1})
        unit["unet_step"] = _per_step(lambda n: train_sd.train_unet(
            one_unet.model_copy(update={"unet_steps": n}), vae, tokenizer, pool[:64],
            captions[:64], device), device)

        def small_clip(n: int):
            return clip.model_copy(update={"pool_size": 64, "steps": n, "warmup": 1,
                                           "finetune_steps": n})

        out = Path(tmp)
        unit["clip_step"] = _per_step(lambda n: train_clip.pretrain(out, small_clip(n), device),
                                      device)
        k = mining.images_per_prompt
        fake = Mined(prompts=[c for c in captions[:8] for _ in range(k)],
                     correct=[i % 2 == 0 for i in range(8 * k)], readings=[None] * (8 * k),
                     images_per_prompt=k)
        images = np.repeat(pool[:8], k, axis=0)
        unit["finetune_step"] = _per_step(
            lambda n: train_clip.finetune(out, small_clip(n), fake, images, device))
        from diffusers import StableDiffusionPipeline

        from .train_sd import save_pipeline

        unet, text_encoder, scheduler = train_sd.train_unet(one_unet, vae, tokenizer, pool[:8],
                                                            captions[:8], device)
        save_pipeline(out / "sd", vae, text_encoder, tokenizer, unet, scheduler)
        pipe = StableDiffusionPipeline.from_pretrained(str(out / "sd")).to(device)
        pipe.set_progress_bar_config(disable=True)
        batch = 16
        unit["generate"] = _timed(lambda: generate(pipe, captions[:batch], list(range(batch)),
                                                   mining.steps, mining.guidance, batch),
                                  1) / batch
        unit["verdict"] = _timed(lambda: verdicts(captions[:32], pool[:32]), 1) / 32
    stages = {
        "generator": sd.pool_size * (unit["render"] + unit["encode"])
        + sd.vae_steps * unit["vae_step"] + sd.unet_steps * unit["unet_step"],
        "clip_clean": clip.pool_size * unit["render"] + clip.steps * unit["clip_step"],
        "mining": mining.prompts * mining.images_per_prompt
        * (unit["generate"] + unit["verdict"]),
        "clip_hard_negatives": clip.pool_size * unit["render"]
        + clip.finetune_steps * unit["finetune_step"],
    }
    total = (max(stages["generator"], stages["clip_clean"]) + stages["mining"]
             + stages["clip_hard_negatives"])
    steps = None
    if budget_seconds is not None:
        first = FIRST_PHASE_SHARE * budget_seconds - sd.pool_size * unit["render"]
        steps = {"vae": int(train_sd.VAE_SHARE * first / unit["vae_step"]),
                 "unet": int((1 - train_sd.VAE_SHARE) * first / unit["unet_step"]),
                 "clip_clean": int(FIRST_PHASE_SHARE * budget_seconds / unit["clip_step"])}
    return Estimate(per_unit=unit, stages=stages, total_minutes=total / 60,
                    budgeted_steps=steps)
