"""Train the shapes text-to-image pipeline: VAE, then UNet and text encoder together.

Writes ``OUT/shapes-sd``, a diffusers ``StableDiffusionPipeline`` that loads with
``from_pretrained``. Run through :mod:`.train`, which also trains shapes-clip.

Both stages train from a pool of pre-rendered images (:func:`.dataset.render_pool`): at these
model sizes rendering per step would cost as much as the step. The VAE trains on random 32x32
crops of the 64x64 images: it is fully convolutional (no attention), flat shapes look the same
in a crop, and a crop costs a quarter of a full image. The text encoder is trained jointly with
the UNet rather than frozen at random: conditioning quality is what every downstream number
depends on. Captions are dropped 10% of the time so classifier-free guidance works.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel

from .models import build_scheduler, build_text_encoder, build_tokenizer, build_unet, build_vae

logger = logging.getLogger(__name__)


class SDTrainConfig(BaseModel):
    seed: int = 0
    pool_size: int = 16384
    vae_steps: int = 1500
    vae_batch: int = 32
    vae_crop: int = 32
    vae_lr: float = 1e-3
    kl_weight: float = 1e-3
    unet_steps: int = 2500
    unet_batch: int = 64
    unet_lr: float = 1e-3
    caption_dropout: float = 0.1
    ema_decay: float = 0.999
    warmup: int = 100

    @classmethod
    def smoke(cls) -> SDTrainConfig:
        return cls(pool_size=16, vae_steps=2, vae_batch=4, unet_steps=2, unet_batch=4, warmup=1)


def to_pixels(images: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """uint8 ``(B, H, W, 3)`` -> float ``(B, 3, H, W)`` in [-1, 1] on ``device``."""
    x = torch.from_numpy(np.ascontiguousarray(images)).to(device)
    return x.permute(0, 3, 1, 2).float() / 127.5 - 1.0


def lr_lambda(warmup: int, total: int):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    return f


def train_vae(cfg: SDTrainConfig, pool: np.ndarray, device: str):
    torch.manual_seed(cfg.seed)
    vae = build_vae().to(device)
    opt = torch.optim.AdamW(vae.parameters(), lr=cfg.vae_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup, cfg.vae_steps))
    gen = torch.Generator().manual_seed(cfg.seed + 3)
    size, crop = pool.shape[1], cfg.vae_crop
    start = time.monotonic()
    for step in range(cfg.vae_steps):
        pick = torch.randint(0, len(pool), (cfg.vae_batch,), generator=gen).numpy()
        y0, x0 = torch.randint(0, size - crop + 1, (2,), generator=gen).tolist()
        x = to_pixels(pool[pick, y0:y0 + crop, x0:x0 + crop], device)
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
    with torch.no_grad():
        std = vae.encode(to_pixels(pool[:256], device)).latent_dist.mean.std().item()
    vae.register_to_config(scaling_factor=1.0 / std)
    logger.info("vae latent std %.3f -> scaling_factor %.3f", std, 1.0 / std)
    return vae


def encode_pool(vae, tokenizer, pool: np.ndarray, captions: list[str], device: str):
    """Latent mean and std of the pool's images, their token ids, and the empty prompt's ids."""
    means, stds = [], []
    with torch.no_grad():
        for lo in range(0, len(pool), 256):
            dist = vae.encode(to_pixels(pool[lo:lo + 256], device)).latent_dist
            means.append(dist.mean)
            stds.append(dist.std)
    unique = sorted(set(captions)) + [""]
    ids = tokenizer(unique, padding="max_length", max_length=tokenizer.model_max_length,
                    truncation=True, return_tensors="pt").input_ids.to(device)
    row = {c: i for i, c in enumerate(unique)}
    token_ids = ids[torch.tensor([row[c] for c in captions], device=device)]
    return torch.cat(means), torch.cat(stds), token_ids, ids[-1]


def train_unet(cfg: SDTrainConfig, vae, tokenizer, pool: np.ndarray, captions: list[str],
               device: str):
    """Train UNet and text encoder; returns copies holding their EMA weights, and the scheduler."""
    mean, std, token_ids, empty_ids = encode_pool(vae, tokenizer, pool, captions, device)
    logger.info("encoded a pool of %d latents", len(mean))
    torch.manual_seed(cfg.seed + 1)
    unet, text_encoder = build_unet().to(device), build_text_encoder().to(device)
    scheduler = build_scheduler()
    params = list(unet.parameters()) + list(text_encoder.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=cfg.unet_lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup, cfg.unet_steps))
    # Random numbers come from a CPU generator, so a seed means the same batches on any device.
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    sf = vae.config.scaling_factor
    start = time.monotonic()
    for step in range(cfg.unet_steps):
        b = cfg.unet_batch
        pick = torch.randint(0, len(mean), (b,), generator=gen).to(device)
        drop = (torch.rand(b, generator=gen) < cfg.caption_dropout).to(device)
        ids = torch.where(drop[:, None], empty_ids[None], token_ids[pick])
        eps = torch.randn(mean[pick].shape, generator=gen).to(device)
        latents = (mean[pick] + std[pick] * eps) * sf
        noise = torch.randn(latents.shape, generator=gen).to(device)
        t = torch.randint(0, scheduler.config.num_train_timesteps, (b,), generator=gen)
        noisy = scheduler.add_noise(latents, noise, t.to(device))
        cond = text_encoder(ids).last_hidden_state
        pred = unet(noisy, t.to(device), encoder_hidden_states=cond).sample
        # Plain MSE on v: at t = T (SNR 0) v = -x0, so the terminal step is trained too.
        loss = F.mse_loss(pred, scheduler.get_velocity(latents, noise, t.to(device)))
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
    return *_with_ema(unet, text_encoder, params, ema), scheduler


def _with_ema(unet, text_encoder, params, ema):
    """Copies of the two models holding the EMA weights (training continues on the originals)."""
    unet_copy, text_copy = copy.deepcopy(unet), copy.deepcopy(text_encoder)
    copies = list(unet_copy.parameters()) + list(text_copy.parameters())
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
    pipe.to("cpu").save_pretrained(out, safe_serialization=True)
    # transformers writes a 3.6 MB tokenizer.json; the classic vocab.json + merges.txt layout
    # (1.5 MB) loads the same tokenizer and keeps the package under its size budget.
    tok_dir = out / "tokenizer"
    (tok_dir / "tokenizer.json").unlink(missing_ok=True)
    build_tokenizer(tok_dir)


def train_generator(out: Path, cfg: SDTrainConfig, device: str, workers: int = 1) -> Path:
    """Render the pool, train the VAE, then UNet and text encoder; write ``out/shapes-sd``."""
    import shutil

    from .dataset import render_pool

    pool, captions = render_pool(range(cfg.pool_size), workers)
    logger.info("rendered %d training images", len(pool))
    tok_dir = out / ".tokenizer-build"
    tokenizer = build_tokenizer(tok_dir)
    vae = train_vae(cfg, pool, device)
    unet, text_encoder, scheduler = train_unet(cfg, vae, tokenizer, pool, captions, device)
    target = out / "shapes-sd"
    save_pipeline(target, vae, text_encoder, tokenizer, unet, scheduler)
    shutil.rmtree(tok_dir)
    return target
