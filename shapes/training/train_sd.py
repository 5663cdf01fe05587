"""Train the shapes text-to-image pipeline: VAE, then UNet and text encoder together.

Writes ``OUT/shapes-sd``, a diffusers ``StableDiffusionPipeline`` that loads with
``from_pretrained``. Run through :mod:`.train`, which also trains shapes-clip.

Both stages train from a pool of pre-rendered images (:func:`..dataset.render_pool`): at these
model sizes rendering per step would cost as much as the step. The VAE trains on random 32x32
crops of the 64x64 images: it is fully convolutional (no attention), flat shapes look the same
in a crop, and a crop costs a quarter of a full image. The text encoder is trained jointly with
the UNet rather than frozen at random: conditioning quality is what every downstream number
depends on. Captions are dropped 10% of the time so classifier-free guidance works.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel

from genloop.shapes.models import (
    UNetShape,
    build_scheduler,
    build_text_encoder,
    build_tokenizer,
    build_unet,
    build_vae,
)

from .steps import LOOPS_FILE, StepPlan, adamw, autocast, is_cuda, update

logger = logging.getLogger(__name__)


#: Share of a budgeted generator stage the VAE gets (after rendering); the UNet gets the rest.
#: The v2 run's VAE (1,500 steps of 32 random crops, plain L1 + MSE) round-trips held-out
#: renders with shape right only 0.82 of the time, a ceiling below the goal of 0.95; crops on
#: the objects with their outlines weighted 11x and a learning rate of 2e-3 reach shape 0.975
#: in the same 1,500 steps (``benchmarks/shapes_vae.py``).
VAE_SHARE = 0.2
#: Seconds kept back from a budgeted UNet for the EMA copies and saving the pipeline.
SAVE_SECONDS = 5.0


class SDTrainConfig(BaseModel):
    seed: int = 0
    pool_size: int = 16384
    vae_steps: int = 1500
    vae_batch: int = 32
    vae_crop: int = 32
    #: 2e-3 with outlines weighted 11x: held-out round trip shape 0.975, two-object
    #: all-correct 0.955 at 1,500 steps, against 0.93 and 0.845 at 1e-3 and 5x.
    vae_lr: float = 2e-3
    kl_weight: float = 1e-3
    #: Crops centred on the image's objects (jittered by up to ``vae_crop_jitter`` pixels)
    #: rather than one random corner per batch, where many crops hold background only.
    vae_crop_on_objects: bool = True
    vae_crop_jitter: int = 8
    #: Extra loss weight on object pixels and the ring around them: flat background is most
    #: of every image, and a plain mean lets it drown out the shapes' outlines.
    #: Object pixels weigh ``1 + vae_foreground_weight``.
    vae_foreground_weight: float = 10.0
    #: Weight of an L1 loss on horizontal and vertical pixel differences (edges).
    vae_edge_weight: float = 1.0
    #: Full CPU runs (docs/shapes-model-card.md): 2,500 steps drew one-object scenes
    #: all-correct 0.76 of the time (36 min in all), 4,000 steps 0.95 (42 min, with other
    #: work beside it).
    unet_steps: int = 4000
    unet_batch: int = 64
    unet_lr: float = 1e-3
    #: Extra loss weight on latent cells under an object or its outline, as the VAE's: a
    #: shape is a few latent cells in a flat field, and a plain mean lets the field drown out
    #: what tells a star from a circle. Those cells weigh ``1 + unet_foreground_weight``.
    #: At 1,500 steps of batch 32 it took generated colour from 0.42 to 1.00 and size from
    #: 0.67 to 0.94 (``benchmarks/shapes_unet.py``, variants ``v2-run`` / ``foreground``).
    unet_foreground_weight: float = 10.0
    #: Mean and std of logit(t / T) for the UNet's training timesteps (logit-normal sampling,
    #: Esser et al. 2024, "Scaling Rectified Flow Transformers"); None: uniform over t. A mean
    #: of 1.0 spends 84% of the steps on the noisier half, where the prompt decides what is
    #: drawn: at 2,500 steps of batch 32 all-correct went from 0.28 (uniform) to 0.44 (mean
    #: 0.5) and 0.54 (1.0), as much as uniform reached in 4,000 steps (``benchmarks/
    #: shapes_unet.py``, docs/shapes-model-card.md). Centred (mean 0) lost position (0.36): it
    #: rarely trains the steps near pure noise, where the zero-terminal-SNR schedule places
    #: the shape from the text alone.
    unet_timestep_logit: tuple[float, float] | None = (1.0, 1.0)
    caption_dropout: float = 0.1
    ema_decay: float = 0.999
    warmup: int = 100
    #: The UNet's architecture (:func:`~genloop.shapes.models.build_unet`). The
    #: caption pooled into the timestep embedding took generated position from 0.35 to 0.58
    #: at 1,500 steps (variants ``foreground`` / ``recipe``), same step cost.
    unet: UNetShape = UNetShape(text_in_time_embedding=True)

    @classmethod
    def smoke(cls) -> SDTrainConfig:
        return cls(pool_size=16, vae_steps=2, vae_batch=4, unet_steps=2, unet_batch=4, warmup=1)

    @classmethod
    def gpu(cls) -> SDTrainConfig:
        """The GPU recipe: batches that fill a GPU (a small model's step costs about the same
        at 64 and 256), a longer warm-up and EMA to match, cross-attention at 16x16 too (where
        a small shape's corners are), and step counts that ``--budget-seconds`` usually
        replaces with what fits."""
        return cls(pool_size=65536, vae_steps=3000, vae_batch=128, unet_steps=20000,
                   unet_batch=256, unet_lr=1e-3, warmup=300, ema_decay=0.9995,
                   unet=UNetShape(attention_at_16=True, text_in_time_embedding=True))


def to_pixels(images: np.ndarray | torch.Tensor,
              device: str | torch.device = "cpu") -> torch.Tensor:
    """uint8 ``(B, H, W, 3)`` -> float ``(B, 3, H, W)`` in [-1, 1] on ``device``."""
    x = torch.as_tensor(np.ascontiguousarray(images) if isinstance(images, np.ndarray)
                        else images).to(device)
    return x.permute(0, 3, 1, 2).float() / 127.5 - 1.0


def _set_lr(opt, peak: float, factor: float) -> None:
    for group in opt.param_groups:
        group["lr"] = peak * factor


def train_vae(cfg: SDTrainConfig, pool: np.ndarray, device: str, seconds: float | None = None,
              record: dict | None = None):
    """Train the VAE on crops of ``pool`` (around its objects, or at random corners; see
    :class:`SDTrainConfig`); ``seconds``: as many steps as fit.
    ``record`` gets the loop's :meth:`~.steps.StepPlan.summary` under ``"vae"``."""
    torch.manual_seed(cfg.seed)
    # diffusers wraps ``to`` in functools.wraps(Module.to), whose type has no ``self``.
    vae = build_vae().to(device)  # type: ignore[arg-type]
    opt = adamw(vae.parameters(), cfg.vae_lr, 0.0, device)
    plan = StepPlan(cfg.vae_steps, cfg.warmup, device, seconds, min_steps=cfg.warmup)
    # The pool lives on the device and random numbers are drawn there: a step copies nothing
    # from the host and waits for nothing (random crop corners come from a CPU generator: they
    # are Python ints).
    images = torch.from_numpy(pool).to(device)
    backgrounds = to_pixels(images[:, :1, :1], device)  # each image's corner pixel
    gen = torch.Generator(device).manual_seed(cfg.seed + 3)
    corners = torch.Generator().manual_seed(cfg.seed + 4)
    size, crop = pool.shape[1], cfg.vae_crop
    centres = object_centres(pool).to(device) if cfg.vae_crop_on_objects else None
    start = time.monotonic()
    step = 0
    while step < plan.total:
        _set_lr(opt, cfg.vae_lr, plan.lr_factor(step))
        pick = torch.randint(0, len(images), (cfg.vae_batch,), generator=gen, device=device)
        if centres is None:
            y0, x0 = torch.randint(0, size - crop + 1, (2,), generator=corners).tolist()
            batch = images[pick, y0:y0 + crop, x0:x0 + crop]
        else:
            batch = crops_around(images, pick, centres, crop, cfg.vae_crop_jitter, gen)
        x = to_pixels(batch, device)
        with autocast(device):
            posterior = vae.encode(x).latent_dist
            recon = vae.decode(posterior.sample()).sample.float()
        rec = reconstruction_loss(recon, x, backgrounds[pick], cfg)
        kl = posterior.kl().float().mean() / posterior.mean[0].numel()
        loss = rec + cfg.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        plan.after_step(step)
        if step % 500 == 0 or step == plan.total - 1:
            logger.info("vae step %d/%d rec %.4f kl %.3f (%.0fs)", step, plan.total, rec.item(),
                        kl.item(), time.monotonic() - start)
        step += 1
    vae.eval().requires_grad_(False)
    # Scale latents to unit variance, as Stable Diffusion's scaling_factor does.
    with torch.no_grad():
        std = vae.encode(to_pixels(images[:256], device)).latent_dist.mean.std().item()
    vae.register_to_config(scaling_factor=1.0 / std)
    logger.info("vae latent std %.3f -> scaling_factor %.3f (%d steps)", std, 1.0 / std, step)
    if record is not None:
        record["vae"] = plan.summary()
    return vae


def object_pixels(pool: np.ndarray) -> np.ndarray:
    """``(B, H, W)`` bool: the pixels that differ from the image's top-left corner (the
    background: shapes never reach the border)."""
    return np.abs(pool.astype(np.int16) - pool[:, :1, :1].astype(np.int16)).max(axis=3) > 24


def object_centres(pool: np.ndarray) -> torch.Tensor:
    """Per image, the (y, x) centroid of its :func:`object_pixels`; the centre for an empty
    image."""
    diff = object_pixels(pool)
    ys, xs = np.mgrid[:pool.shape[1], :pool.shape[2]]
    count = np.maximum(diff.sum(axis=(1, 2)), 1)
    cy = np.where(diff.any(axis=(1, 2)), (diff * ys).sum(axis=(1, 2)) / count, pool.shape[1] / 2)
    cx = np.where(diff.any(axis=(1, 2)), (diff * xs).sum(axis=(1, 2)) / count, pool.shape[2] / 2)
    return torch.from_numpy(np.stack([cy, cx], axis=1)).float()


def crops_around(images: torch.Tensor, pick: torch.Tensor, centres: torch.Tensor, crop: int,
                  jitter: int, gen: torch.Generator) -> torch.Tensor:
    """``crop``-pixel squares of ``images[pick]`` centred on their objects, each shifted by up
    to ``jitter`` pixels and kept inside the image; ``(B, crop, crop, 3)``."""
    b, size = len(pick), images.shape[1]
    shift = torch.randint(-jitter, jitter + 1, (b, 2), generator=gen, device=images.device)
    corner = (centres[pick].round().long() - crop // 2 + shift).clamp(0, size - crop)
    offsets = torch.arange(crop, device=images.device)
    rows = (corner[:, 0, None] + offsets)[:, :, None]
    cols = (corner[:, 1, None] + offsets)[:, None, :]
    return images[pick[:, None, None], rows, cols]


def reconstruction_loss(recon: torch.Tensor, x: torch.Tensor, background: torch.Tensor,
                         cfg: SDTrainConfig) -> torch.Tensor:
    """L1 + MSE per pixel, optionally weighted up on objects and their outline, plus an
    optional L1 on pixel differences; ``background``: each image's ``(B, 3, 1, 1)`` colour."""
    per_pixel = (recon - x).abs() + (recon - x).square()
    if cfg.vae_foreground_weight:
        on_object = ((x - background).abs().amax(dim=1, keepdim=True) > 0.05).float()
        ring = F.max_pool2d(on_object, 3, stride=1, padding=1)
        per_pixel = per_pixel * (1 + cfg.vae_foreground_weight * ring)
    loss = per_pixel.mean()
    if cfg.vae_edge_weight:
        for dim in (2, 3):
            loss = loss + cfg.vae_edge_weight * F.l1_loss(recon.diff(dim=dim), x.diff(dim=dim))
    return loss


def latent_weights(pool: np.ndarray, latent_size: int, weight: float,
                   device: str) -> torch.Tensor | None:
    """Per image, ``(1, latent_size, latent_size)`` loss weights: ``1 + weight`` on latent
    cells that hold any object pixel or its one-pixel outline, 1 elsewhere; None for weight 0."""
    if not weight:
        return None
    on_object = torch.from_numpy(object_pixels(pool))
    ring = F.max_pool2d(on_object[:, None].float(), 3, stride=1, padding=1)
    cells = F.adaptive_max_pool2d(ring, latent_size)
    return (1 + weight * cells).to(device)


def encode_pool(vae, tokenizer, pool: np.ndarray, captions: list[str], device: str):
    """Latent mean and std of the pool's images, their token ids, and the empty prompt's ids;
    all on ``device``, so UNet steps read them without copies."""
    means, stds = [], []
    with torch.no_grad():
        for lo in range(0, len(pool), 1024):
            dist = vae.encode(to_pixels(pool[lo:lo + 1024], device)).latent_dist
            means.append(dist.mean)
            stds.append(dist.std)
    unique = sorted(set(captions)) + [""]
    ids = tokenizer(unique, padding="max_length", max_length=tokenizer.model_max_length,
                    truncation=True, return_tensors="pt").input_ids.to(device)
    row = {c: i for i, c in enumerate(unique)}
    token_ids = ids[torch.tensor([row[c] for c in captions], device=device)]
    return torch.cat(means), torch.cat(stds), token_ids, ids[-1]


def train_unet(cfg: SDTrainConfig, vae, tokenizer, pool: np.ndarray, captions: list[str],
               device: str, seconds: float | None = None, record: dict | None = None):
    """Train UNet and text encoder; returns copies holding their EMA weights, and the scheduler.

    ``seconds``: as many steps as fit (:class:`.steps.StepPlan`); ``record`` gets the loop's
    summary under ``"unet"``. On CUDA the step runs in bf16
    autocast with channels-last convolutions and a fused AdamW, and never waits for the host.
    """
    t = time.monotonic()
    mean, std, token_ids, empty_ids = encode_pool(vae, tokenizer, pool, captions, device)
    weights = latent_weights(pool, mean.shape[-1], cfg.unet_foreground_weight, device)
    logger.info("encoded a pool of %d latents (%.0fs)", len(mean), time.monotonic() - t)
    if seconds is not None:
        seconds -= time.monotonic() - t
    torch.manual_seed(cfg.seed + 1)
    # diffusers and transformers wrap ``to`` in functools.wraps(Module.to), whose type has no
    # ``self``.
    unet = build_unet(cfg.unet).to(device)  # type: ignore[arg-type]
    text_encoder = build_text_encoder().to(device)  # type: ignore[arg-type]
    if is_cuda(device):
        unet.to(memory_format=torch.channels_last)
    scheduler = build_scheduler()
    params = list(unet.parameters()) + list(text_encoder.parameters())
    ema = [p.detach().clone() for p in params]
    opt = adamw(params, cfg.unet_lr, 0.01, device)
    plan = StepPlan(cfg.unet_steps, cfg.warmup, device, seconds, min_steps=cfg.warmup)
    gen = torch.Generator(device).manual_seed(cfg.seed + 2)
    alphas = scheduler.alphas_cumprod.to(device)
    timesteps = scheduler.config["num_train_timesteps"]
    sf = vae.config.scaling_factor
    start = time.monotonic()
    step = 0
    while step < plan.total:
        _set_lr(opt, cfg.unet_lr, plan.lr_factor(step))
        loss = _unet_loss(unet, text_encoder, cfg, gen, device, mean, std, token_ids,
                          empty_ids, alphas, timesteps, sf, weights)
        update(opt, loss, params, ema, cfg.ema_decay, step)
        plan.after_step(step)
        if step % 500 == 0 or step == plan.total - 1:
            logger.info("unet step %d/%d loss %.4f (%.0fs)", step, plan.total, loss.item(),
                        time.monotonic() - start)
        step += 1
    unet.to(memory_format=torch.contiguous_format)
    if record is not None:
        record["unet"] = plan.summary()
    return *_with_ema(unet, text_encoder, params, ema), scheduler


def _unet_loss(unet, text_encoder, cfg: SDTrainConfig, gen: torch.Generator, device: str,
               mean, std, token_ids, empty_ids, alphas, timesteps: int, sf: float,
               weights: torch.Tensor | None = None):
    """One batch's v-prediction loss, weighted per latent cell by ``weights[pick]`` if given
    (:func:`latent_weights`); every random number is drawn on ``device``."""
    b = cfg.unet_batch
    pick = torch.randint(0, len(mean), (b,), generator=gen, device=device)
    drop = torch.rand(b, generator=gen, device=device) < cfg.caption_dropout
    ids = torch.where(drop[:, None], empty_ids[None], token_ids[pick])
    eps = torch.randn(mean[pick].shape, generator=gen, device=device)
    latents = (mean[pick] + std[pick] * eps) * sf
    noise = torch.randn(latents.shape, generator=gen, device=device)
    t = training_timesteps(cfg.unet_timestep_logit, b, timesteps, gen, device)
    a = alphas[t].sqrt().view(b, 1, 1, 1)
    s = (1 - alphas[t]).sqrt().view(b, 1, 1, 1)
    noisy = a * latents + s * noise
    if is_cuda(device):
        noisy = noisy.contiguous(memory_format=torch.channels_last)
    with autocast(device):
        cond = text_encoder(ids).last_hidden_state
        pred = unet(noisy, t, encoder_hidden_states=cond).sample
    # MSE on v: at t = T (SNR 0) v = -x0, so the terminal step is trained too.
    error = (pred.float() - (a * noise - s * latents)).square()
    if weights is not None:
        error = error * weights[pick]
    return error.mean()


def training_timesteps(logit: tuple[float, float] | None, b: int, timesteps: int,
                       gen: torch.Generator, device: str) -> torch.Tensor:
    """``b`` training timesteps in ``[0, timesteps)``: uniform, or with logit(t / T) drawn from
    a normal of ``logit``'s mean and std (diffusers' SD3 sampler)."""
    if logit is None:
        return torch.randint(0, timesteps, (b,), generator=gen, device=device)
    from diffusers.training_utils import compute_density_for_timestep_sampling

    u = compute_density_for_timestep_sampling("logit_normal", b, logit_mean=logit[0],
                                              logit_std=logit[1], device=device, generator=gen)
    return (u * timesteps).long().clamp(max=timesteps - 1)


def _with_ema(unet, text_encoder, params, ema):
    """Copies of the two models holding the EMA weights (training continues on the originals)."""
    unet_copy, text_copy = copy.deepcopy(unet), copy.deepcopy(text_encoder)
    copies = list(unet_copy.parameters()) + list(text_copy.parameters())
    with torch.no_grad():
        for c, e in zip(copies, ema, strict=True):
            c.copy_(e)
    return unet_copy.eval(), text_copy.eval()


def assemble_pipeline(vae, text_encoder, tokenizer, unet, scheduler):
    """The shapes ``StableDiffusionPipeline`` of these parts (no safety checker)."""
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )


def save_pipeline(out: Path, vae, text_encoder, tokenizer, unet, scheduler) -> None:
    pipe = assemble_pipeline(vae, text_encoder, tokenizer, unet, scheduler)
    pipe.to("cpu").save_pretrained(out, safe_serialization=True)
    # transformers writes a 3.6 MB tokenizer.json; the classic vocab.json + merges.txt layout
    # (1.5 MB) loads the same tokenizer and keeps the package under its size budget.
    tok_dir = out / "tokenizer"
    (tok_dir / "tokenizer.json").unlink(missing_ok=True)
    build_tokenizer(tok_dir)


def train_generator(out: Path, cfg: SDTrainConfig, device: str, workers: int = 1,
                    seconds: float | None = None) -> Path:
    """Render the pool, train the VAE, then UNet and text encoder; write ``out/shapes-sd``.

    ``seconds``: the whole stage's budget; the VAE gets :data:`VAE_SHARE` of what is left
    after rendering, the UNet the rest (each runs as many steps as fit).
    """
    import shutil

    from genloop.shapes.dataset import render_pool

    began = time.monotonic()
    pool, captions = render_pool(range(cfg.pool_size), workers)
    logger.info("rendered %d training images (%.0fs)", len(pool), time.monotonic() - began)
    tok_dir = out / ".tokenizer-build"
    tokenizer = build_tokenizer(tok_dir)
    left = None if seconds is None else seconds - (time.monotonic() - began)
    record: dict = {}
    vae = train_vae(cfg, pool, device, None if left is None else VAE_SHARE * left, record)
    left = None if seconds is None else seconds - (time.monotonic() - began) - SAVE_SECONDS
    unet, text_encoder, scheduler = train_unet(cfg, vae, tokenizer, pool, captions, device, left,
                                               record)
    target = out / "shapes-sd"
    save_pipeline(target, vae, text_encoder, tokenizer, unet, scheduler)
    shutil.rmtree(tok_dir)
    (target / LOOPS_FILE).write_text(json.dumps(record))
    return target
