"""Shapes generator training: the v2 run's UNet step against the GPU-efficient one, side by side.

    python benchmarks/shapes_training.py [--device cuda] [--batch 64] [--steps 30] [--json]

- ``v2-run``: the step of the first v2 run (2,500 steps at batch 64 on an H200): random numbers
  from a CPU generator copied to the device five times a step (each copy waits for the GPU to
  finish the step before), diffusers' ``add_noise`` / ``get_velocity``, fp32, foreach AdamW.
- ``gpu-efficient``: :func:`genloop.shapes.training.train_sd._unet_loss` and what
  ``train_unet`` wraps it in: random numbers drawn on the device, bf16 autocast and
  channels-last on CUDA, fused AdamW; the same model, batch, loss and EMA.
- ``gpu-efficient xB``: the same at ``--big-batch`` (default 256): samples/s is what counts.

Both run the same UNet and text encoder on a pool of pre-encoded latents (random here: the
step's cost does not depend on their values). Prints steps/s, samples/s and ratios; medians of
``--repeats`` timed runs; ``--json`` for machines. On a CPU, time is CPU seconds of this thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from genloop.shapes.models import (
    CONTEXT_LENGTH,
    LATENT_CHANNELS,
    LATENT_SIZE,
    UNetShape,
    build_scheduler,
    build_text_encoder,
    build_unet,
)
from genloop.shapes.training.steps import adamw, is_cuda, synchronize, update
from genloop.shapes.training.train_sd import SDTrainConfig, _unet_loss


def _models(cfg: SDTrainConfig, device: str, channels_last: bool):
    torch.manual_seed(0)
    unet, text = build_unet(cfg.unet).to(device), build_text_encoder().to(device)
    if channels_last:
        unet.to(memory_format=torch.channels_last)
    params = list(unet.parameters()) + list(text.parameters())
    return unet, text, params, [p.detach().clone() for p in params]


def _pool(n: int, device: str):
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(n, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE, generator=g).to(device)
    ids = torch.randint(0, 49406, (n, CONTEXT_LENGTH), generator=g).to(device)
    return mean, mean.abs() * 0.1, ids, ids[0]


def v2_run_steps(cfg: SDTrainConfig, device: str, pool, steps: int) -> None:
    """The first v2 run's loop body, unchanged in substance."""
    unet, text, params, ema = _models(cfg, device, channels_last=False)
    scheduler = build_scheduler()
    opt = torch.optim.AdamW(params, lr=cfg.unet_lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(2)
    mean, std, token_ids, empty_ids = pool
    for step in range(steps):
        b = cfg.unet_batch
        pick = torch.randint(0, len(mean), (b,), generator=gen).to(device)
        drop = (torch.rand(b, generator=gen) < cfg.caption_dropout).to(device)
        ids = torch.where(drop[:, None], empty_ids[None], token_ids[pick])
        eps = torch.randn(mean[pick].shape, generator=gen).to(device)
        latents = mean[pick] + std[pick] * eps
        noise = torch.randn(latents.shape, generator=gen).to(device)
        t = torch.randint(0, scheduler.config.num_train_timesteps, (b,), generator=gen)
        noisy = scheduler.add_noise(latents, noise, t.to(device))
        pred = unet(noisy, t.to(device), encoder_hidden_states=text(ids).last_hidden_state).sample
        loss = F.mse_loss(pred, scheduler.get_velocity(latents, noise, t.to(device)))
        update(opt, loss, params, ema, cfg.ema_decay, step)


def efficient_steps(cfg: SDTrainConfig, device: str, pool, steps: int) -> None:
    unet, text, params, ema = _models(cfg, device, channels_last=is_cuda(device))
    opt = adamw(params, cfg.unet_lr, 0.01, device)
    gen = torch.Generator(device).manual_seed(2)
    scheduler = build_scheduler()
    alphas = scheduler.alphas_cumprod.to(device)
    mean, std, token_ids, empty_ids = pool
    for step in range(steps):
        loss = _unet_loss(unet, text, cfg, gen, device, mean, std, token_ids, empty_ids, alphas,
                          scheduler.config.num_train_timesteps, 1.0)
        update(opt, loss, params, ema, cfg.ema_decay, step)


def seconds_per_step(run, cfg: SDTrainConfig, device: str, pool, steps: int,
                     repeats: int) -> float:
    """Median seconds per step of ``run``; build and warm-up cancelled by differencing."""
    clock = time.perf_counter if is_cuda(device) else time.thread_time

    def timed(n: int) -> float:
        synchronize(device)
        t = clock()
        run(cfg, device, pool, n)
        synchronize(device)
        return clock() - t

    timed(3)  # first calls allocate and pick kernels
    return statistics.median((timed(steps + 3) - timed(3)) / steps for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--big-batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--attention-at-16", action="store_true", help="the GPU recipe's UNet")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = SDTrainConfig(unet_batch=args.batch, unet=UNetShape(attention_at_16=args.attention_at_16))
    pool = _pool(4096, args.device)
    runs = {"v2-run": (v2_run_steps, cfg), "gpu-efficient": (efficient_steps, cfg),
            f"gpu-efficient x{args.big_batch}": (
                efficient_steps, cfg.model_copy(update={"unet_batch": args.big_batch}))}
    per_step = {name: seconds_per_step(run, c, args.device, pool, args.steps, args.repeats)
                for name, (run, c) in runs.items()}
    batch = {name: c.unet_batch for name, (_, c) in runs.items()}
    base = per_step["v2-run"]
    report = {
        "device": args.device, "threads": args.threads, "steps": args.steps,
        "attention_at_16": args.attention_at_16,
        "steps_per_s": {k: round(1 / v, 2) for k, v in per_step.items()},
        "samples_per_s": {k: round(batch[k] / v, 1) for k, v in per_step.items()},
        "samples_ratio_vs_v2_run": {k: round(base / v * batch[k] / args.batch, 2)
                                    for k, v in per_step.items()},
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    for k in per_step:
        print(f"{k:22s} {report['steps_per_s'][k]:8.2f} steps/s {report['samples_per_s'][k]:9.1f}"
              f" samples/s  x{report['samples_ratio_vs_v2_run'][k]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
