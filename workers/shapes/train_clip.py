"""Contrastive training of shapes-clip, an open_clip model with a custom config.

Besides the in-batch captions, each image brings one hard negative per attribute (its caption
with the colour, shape, position or size changed), because ranking the true caption above
exactly those is what the evaluator is used for. Captions repeat within a batch (there are 720
distinct ones), so targets are multi-positive: every copy of an image's caption is right.
Images get mild blur and noise so scores stay meaningful on generated, imperfect images.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel

from . import dataset
from .models import CLIP_CONFIG, CLIP_MODEL_NAME, register_clip_config

logger = logging.getLogger(__name__)

HARD_NEGATIVE_ATTRIBUTES = ("colour", "shape", "position", "size")
CHECKPOINT_NAME = "open_clip_model.safetensors"


class ClipTrainConfig(BaseModel):
    seed: int = 0
    steps: int = 2500
    batch: int = 128
    lr: float = 1e-3
    warmup: int = 100
    # Training seeds are offset from the diffusion stages' so the two models see other images.
    seed_offset: int = 500_000_000

    @classmethod
    def smoke(cls) -> ClipTrainConfig:
        return cls(steps=3, batch=8, warmup=1)


def clip_pixels(images: list) -> torch.Tensor:
    """What open_clip's preprocess gives for a 32x32 image: [0, 1], then CLIP's mean and std."""
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    x = np.stack([dataset.to_array(im) for im in images]) / 255.0
    x = torch.from_numpy(x).permute(0, 3, 1, 2).float()
    mean = torch.tensor(OPENAI_DATASET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_DATASET_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    blur = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16
    blurred = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"),
                       blur.expand(3, 1, 3, 3), groups=3)
    pick = (torch.rand(len(x), 1, 1, 1, generator=gen) < 0.5).float()
    x = pick * blurred + (1 - pick) * x
    sigma = torch.rand(len(x), 1, 1, 1, generator=gen) * 0.15
    return x + sigma * torch.randn(x.shape, generator=gen)


def _lr(step: int, cfg: ClipTrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * progress))


def train_clip(out: Path, cfg: ClipTrainConfig) -> Path:
    import open_clip
    from safetensors.torch import save_file

    target = out / CLIP_MODEL_NAME
    target.mkdir(parents=True, exist_ok=True)
    config_path = target / f"{CLIP_MODEL_NAME}.json"
    config_path.write_text(json.dumps(CLIP_CONFIG, indent=2) + "\n")
    register_clip_config(config_path)
    torch.manual_seed(cfg.seed)
    model = open_clip.create_model(CLIP_MODEL_NAME)
    tokenizer = open_clip.get_tokenizer(CLIP_MODEL_NAME)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.05)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    rng = random.Random(cfg.seed)
    start = time.monotonic()
    model.train()
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = _lr(step, cfg)
        base = cfg.seed_offset + step * cfg.batch
        samples = [dataset.sample(s) for s in range(base, base + cfg.batch)]
        captions = [s.caption for s in samples]
        negatives = [rng.choice(dataset.one_attribute_variants(s.attributes, a)).caption()
                     for s in samples for a in HARD_NEGATIVE_ATTRIBUTES]
        texts = captions + negatives
        images = _augment(clip_pixels([s.image for s in samples]), gen)
        img = F.normalize(model.encode_image(images), dim=-1)
        txt = F.normalize(model.encode_text(tokenizer(texts)), dim=-1)
        scale = model.logit_scale.exp()
        same = torch.tensor([[c == t for t in texts] for c in captions], dtype=torch.float32)
        logits_i = scale * img @ txt.T
        loss_i = -(F.log_softmax(logits_i, dim=1) * same / same.sum(1, keepdim=True)).sum(1)
        square = same[:, : len(captions)]
        logits_t = logits_i[:, : len(captions)].T
        loss_t = -(F.log_softmax(logits_t, dim=1) * square / square.sum(1, keepdim=True)).sum(1)
        loss = (loss_i.mean() + loss_t.mean()) / 2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        if step % 100 == 0 or step == cfg.steps - 1:
            logger.info("clip step %d loss %.4f scale %.1f (%.0fs)", step, loss.item(),
                        scale.item(), time.monotonic() - start)
    # fp16 halves the file; open_clip casts back to the model's fp32 when it loads the state.
    state = {k: v.detach().half().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(target / CHECKPOINT_NAME))
    return target
