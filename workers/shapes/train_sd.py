"""Train the shapes text-to-image pipeline (and, via :mod:`.train_clip`, shapes-clip).

    python -m genloop.workers.shapes.train --out DIR [--smoke] [--only sd|clip|vae]

Writes ``DIR/shapes-sd`` (a diffusers ``StableDiffusionPipeline``) and ``DIR/shapes-clip`` (an
open_clip checkpoint plus its config). Seeded and single-threaded, so a rerun on the same
machine gives the same weights. Measured on a 2-core machine shared with other jobs, one thread
each: VAE 2000 steps ~12 min, UNet + text encoder 2500 steps ~15-20 min, CLIP 2500 steps
~15-35 min. Without ``--only`` the two models train at once, each in a process of its own on
one core (about 35 min there), so a 2-core machine retrains everything inside the hour.
``--only vae`` then ``--only sd --resume-vae`` gives the same weights as ``--only sd``.

The text encoder is trained jointly with the UNet rather than frozen at random: it costs little
(a 2-layer width-32 transformer), and conditioning quality is what every downstream number
depends on. Captions are dropped 10% of the time so classifier-free guidance works.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel

from . import dataset
from .models import build_scheduler, build_text_encoder, build_tokenizer, build_unet, build_vae

logger = logging.getLogger(__name__)


class SDTrainConfig(BaseModel):
    seed: int = 0
    vae_steps: int = 2000
    vae_batch: int = 32
    vae_lr: float = 1e-3
    kl_weight: float = 1e-3
    unet_steps: int = 2500
    unet_batch: int = 64
    unet_lr: float = 1e-3
    caption_dropout: float = 0.1
    ema_decay: float = 0.999
    warmup: int = 100
    # UNet batches come from a pool of pre-encoded training images: rendering and encoding them
    # every step would cost as much as the UNet itself.
    pool_size: int = 16384
    save_every: int = 500

    @classmethod
    def smoke(cls) -> SDTrainConfig:
        return cls(vae_steps=3, vae_batch=4, unet_steps=3, unet_batch=4, warmup=1, pool_size=8)


def image_batch(seeds: range | list[int]) -> tuple[torch.Tensor, list[str]]:
    """Images in [-1, 1] as ``(B, 3, 32, 32)`` and their captions."""
    samples = [dataset.sample(s) for s in seeds]
    pixels = np.stack([dataset.to_array(s.image) for s in samples]) / 127.5 - 1.0
    return torch.from_numpy(pixels).permute(0, 3, 1, 2).float(), [s.caption for s in samples]


def lr_lambda(warmup: int, total: int):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    return f


def train_vae(cfg: SDTrainConfig):
    torch.manual_seed(cfg.seed)
    vae = build_vae()
    opt = torch.optim.AdamW(vae.parameters(), lr=cfg.vae_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup, cfg.vae_steps))
    start = time.monotonic()
    for step in range(cfg.vae_steps):
        x, _ = image_batch(range(step * cfg.vae_batch, (step + 1) * cfg.vae_batch))
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample()).sample
        rec = F.l1_loss(recon, x) + F.mse_loss(recon, x)
        kl = posterior.kl().mean() / posterior.mean[0].numel()
        loss = rec + cfg.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == cfg.vae_steps - 1:
            logger.info("vae step %d rec %.4f kl %.3f (%.0fs)", step, rec.item(), kl.item(),
                        time.monotonic() - start)
    vae.eval().requires_grad_(False)
    # Scale latents to unit variance, as Stable Diffusion's scaling_factor does.
    x, _ = image_batch(range(10_000_000, 10_000_512))
    std = vae.encode(x).latent_dist.mean.std().item()
    vae.register_to_config(scaling_factor=1.0 / std)
    logger.info("vae latent std %.3f -> scaling_factor %.3f", std, 1.0 / std)
    return vae


def encode_pool(cfg: SDTrainConfig, vae, tokenizer) -> tuple[torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor]:
    """Latent mean and std of ``pool_size`` training images, their token ids, and the empty
    prompt's ids (for caption dropout)."""
    means, stds, captions = [], [], []
    with torch.no_grad():
        for lo in range(0, cfg.pool_size, 256):
            x, caps = image_batch(range(lo, min(lo + 256, cfg.pool_size)))
            dist = vae.encode(x).latent_dist
            means.append(dist.mean)
            stds.append(dist.std)
            captions += caps
    unique = sorted(set(captions)) + [""]
    ids = tokenizer(unique, padding="max_length", max_length=tokenizer.model_max_length,
                    truncation=True, return_tensors="pt").input_ids
    row = {c: i for i, c in enumerate(unique)}
    token_ids = ids[torch.tensor([row[c] for c in captions])]
    return torch.cat(means), torch.cat(stds), token_ids, ids[-1]


def train_unet(cfg: SDTrainConfig, vae, tokenizer, save=None):
    """Train UNet and text encoder; ``save(unet, text_encoder, scheduler)`` gets EMA weights
    every ``save_every`` steps so a run stopped early still leaves a usable model."""
    mean, std, token_ids, empty_ids = encode_pool(cfg, vae, tokenizer)
    logger.info("encoded a pool of %d latents", len(mean))
    torch.manual_seed(cfg.seed + 1)
    unet, text_encoder = build_unet(), build_text_encoder()
    scheduler = build_scheduler()
    params = list(unet.parameters()) + list(text_encoder.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=cfg.unet_lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup, cfg.unet_steps))
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    sf = vae.config.scaling_factor
    start = time.monotonic()
    for step in range(cfg.unet_steps):
        pick = torch.randint(0, len(mean), (cfg.unet_batch,), generator=gen)
        drop = torch.rand(cfg.unet_batch, generator=gen) < cfg.caption_dropout
        ids = torch.where(drop[:, None], empty_ids[None], token_ids[pick])
        eps = torch.randn(mean[pick].shape, generator=gen)
        latents = (mean[pick] + std[pick] * eps) * sf
        noise = torch.randn(latents.shape, generator=gen)
        t = torch.randint(0, scheduler.config.num_train_timesteps, (cfg.unet_batch,),
                          generator=gen)
        noisy = scheduler.add_noise(latents, noise, t)
        cond = text_encoder(ids).last_hidden_state
        pred = unet(noisy, t, encoder_hidden_states=cond).sample
        # Plain MSE on v: at t = T (SNR 0) v = -x0, so the terminal step is trained too.
        loss = F.mse_loss(pred, scheduler.get_velocity(latents, noise, t))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        decay = min(cfg.ema_decay, (1 + step) / (10 + step))
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - decay)
        if step % 100 == 0 or step == cfg.unet_steps - 1:
            logger.info("unet step %d loss %.4f (%.0fs)", step, loss.item(),
                        time.monotonic() - start)
        if save is not None and (step + 1) % cfg.save_every == 0 and step + 1 < cfg.unet_steps:
            save(*_with_ema(unet, text_encoder, params, ema), scheduler)
            logger.info("saved EMA checkpoint at step %d", step + 1)
    return *_with_ema(unet, text_encoder, params, ema), scheduler


def _with_ema(unet, text_encoder, params, ema):
    """Copies of the two models holding the EMA weights (training continues on the originals)."""
    unet_copy, text_copy = copy.deepcopy(unet), copy.deepcopy(text_encoder)
    copies = list(unet_copy.parameters()) + list(text_copy.parameters())
    assert len(copies) == len(params)
    with torch.no_grad():
        for c, e in zip(copies, ema, strict=True):
            c.copy_(e)
    return unet_copy.eval(), text_copy.eval()


def save_pipeline(out: Path, vae, text_encoder, tokenizer, unet, scheduler) -> None:
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipe.save_pretrained(out, safe_serialization=True)
    # transformers writes a 3.6 MB tokenizer.json; the classic vocab.json + merges.txt layout
    # (1.5 MB) loads the same tokenizer and keeps the package under its size budget.
    tok_dir = out / "tokenizer"
    (tok_dir / "tokenizer.json").unlink(missing_ok=True)
    build_tokenizer(tok_dir)


def train_sd(out: Path, cfg: SDTrainConfig, resume_vae: bool = False) -> Path:
    """Train VAE, then UNet and text encoder; with ``resume_vae``, reuse ``out/.vae-stage``."""
    from diffusers import AutoencoderKL

    tok_dir = out / ".tokenizer-build"
    tokenizer = build_tokenizer(tok_dir)
    vae_dir = out / ".vae-stage"
    if resume_vae and vae_dir.is_dir():
        vae = AutoencoderKL.from_pretrained(str(vae_dir)).eval().requires_grad_(False)
        logger.info("reusing the VAE in %s", vae_dir)
    else:
        vae = train_vae(cfg)
        vae.save_pretrained(str(vae_dir))
    target = out / "shapes-sd"

    def save(unet, text_encoder, scheduler) -> None:
        save_pipeline(target, vae, text_encoder, tokenizer, unet, scheduler)

    save(*train_unet(cfg, vae, tokenizer, save))
    shutil.rmtree(tok_dir)
    shutil.rmtree(vae_dir)
    return target


def main(argv: list[str] | None = None) -> None:
    from .train_clip import ClipTrainConfig, train_clip

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true", help="a few tiny steps, for tests")
    parser.add_argument("--only", choices=["sd", "clip", "vae"], default=None,
                        help="vae: train only the VAE stage, into OUT/.vae-stage")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resume-vae", action="store_true",
                        help="reuse the VAE a stopped run left in OUT/.vae-stage")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if args.only is None and not args.smoke:
        _train_both_at_once(args.out, args.threads)
        logger.info("done in %.0fs", time.monotonic() - start)
        return
    if args.only == "vae":
        cfg = SDTrainConfig.smoke() if args.smoke else SDTrainConfig()
        train_vae(cfg).save_pretrained(str(args.out / ".vae-stage"))
    if args.only in (None, "sd"):
        cfg = SDTrainConfig.smoke() if args.smoke else SDTrainConfig()
        logger.info("wrote %s", train_sd(args.out, cfg, args.resume_vae))
    if args.only in (None, "clip"):
        ccfg = ClipTrainConfig.smoke() if args.smoke else ClipTrainConfig()
        logger.info("wrote %s", train_clip(args.out, ccfg))
    logger.info("done in %.0fs", time.monotonic() - start)


def _train_both_at_once(out: Path, threads: int) -> None:
    """The pipeline and shapes-clip are independent: train them in two processes."""
    import subprocess
    import sys

    procs = {
        only: subprocess.Popen([sys.executable, "-m", __name__, "--out", str(out),
                                "--only", only, "--threads", str(threads)])
        for only in ("sd", "clip")
    }
    failed = [only for only, proc in procs.items() if proc.wait() != 0]
    if failed:
        raise SystemExit(f"training failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
