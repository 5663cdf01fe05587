"""Contrastive training of shapes-clip, an open_clip model with a custom config, in two phases.

1. **Clean** (:func:`pretrain`): rendered images and their captions. Each image also brings
   hard-negative captions (its caption with one clause changed: colour, shape, size, place,
   relation, or the two objects swapped), because ranking the true caption above exactly those
   is what the evaluator is for. Captions repeat within a batch, so targets are multi-positive:
   every caption that describes the same picture (:meth:`~..scene.Pair.canonical`) is right.
2. **Hard negatives** (:func:`finetune`): the clean batches continue, and beside them come the
   generator's own images mined by :mod:`.mining`: an image the checker passed is a positive
   of its prompt; one it failed is a negative of its prompt and a positive of what the checker
   read in it; and within each prompt's group of images, the prompt must pick the passed ones
   out (the selection a loop makes). Nothing here sees a held-out seed or combination.

Images get mild blur and noise so scores stay meaningful on generated, imperfect images.
"""

from __future__ import annotations

import functools
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

from genloop.shapes.dataset import is_novel, render_pool
from genloop.shapes.models import CLIP_CONFIG, CLIP_MODEL_NAME, register_clip_config
from genloop.shapes.scene import (
    ATTRIBUTE_NAMES,
    PAIR_CLAUSES,
    Attributes,
    one_attribute_variants,
    parse_caption,
)

from .steps import LOOPS_FILE, StepPlan, adamw, autocast

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "open_clip_model.safetensors"
_ONE_CLAUSES = tuple(a for a in ATTRIBUTE_NAMES if a != "background")
_PAIR_CLAUSES = tuple(c for c in PAIR_CLAUSES if c != "background") + ("order",)
NEGATIVES_PER_IMAGE = 4


class ClipTrainConfig(BaseModel):
    seed: int = 0
    pool_size: int = 32768
    # Training seeds are offset from the generator's so the two models see other images.
    seed_offset: int = 500_000_000
    steps: int = 2500
    batch: int = 128
    lr: float = 1e-3
    warmup: int = 100
    finetune_steps: int = 500
    finetune_lr: float = 3e-4
    #: Mined prompt groups per fine-tuning step (each brings all its generated images).
    finetune_groups: int = 8

    @classmethod
    def smoke(cls) -> ClipTrainConfig:
        return cls(pool_size=16, steps=2, batch=8, warmup=1, finetune_steps=2, finetune_groups=2)


def clip_pixels(images: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """What open_clip's preprocess gives for uint8 ``(B, H, W, 3)`` at the model's size."""
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    x = torch.from_numpy(np.ascontiguousarray(images)).to(device).permute(0, 3, 1, 2).float()
    mean = torch.tensor(OPENAI_DATASET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_DATASET_STD, device=device).view(1, 3, 1, 1)
    return (x / 255.0 - mean) / std


_BLUR = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]) / 16


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Mild blur (half the images) and noise; ``gen`` lives on ``x``'s device."""
    blurred = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"),
                       _BLUR.to(x.device).expand(3, 1, 3, 3), groups=3)
    pick = (torch.rand(len(x), 1, 1, 1, generator=gen, device=x.device) < 0.5).float()
    x = pick * blurred + (1 - pick) * x
    sigma = torch.rand(len(x), 1, 1, 1, generator=gen, device=x.device) * 0.15
    return x + sigma * torch.randn(x.shape, generator=gen, device=x.device)


# Captions repeat across steps, so parsing, variants and tokens are cached per caption: on a GPU
# the per-text Python work would otherwise cost more than the model.
@functools.cache
def _variants(caption: str) -> dict[str, tuple[str, ...]]:
    scene = parse_caption(caption)
    clauses = _ONE_CLAUSES if isinstance(scene, Attributes) else _PAIR_CLAUSES
    return {c: tuple(v.caption() for v in one_attribute_variants(scene, c) if not is_novel(v))
            for c in clauses}


def hard_negatives(caption: str, rng: random.Random) -> list[str]:
    """Captions that differ from ``caption`` in one clause, none with a held-out combination."""
    variants = _variants(caption)
    clauses = rng.sample(sorted(variants), min(NEGATIVES_PER_IMAGE, len(variants)))
    return [rng.choice(variants[c]) for c in clauses if variants[c]]


@functools.cache
def _key(caption: str) -> str:
    return parse_caption(caption).canonical().caption()


class _Tokens:
    """open_clip's tokenizer with a per-caption cache."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[str, torch.Tensor] = {}

    def __call__(self, texts: list[str]) -> torch.Tensor:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.tokenizer(missing), strict=True))
        return torch.stack([self.cache[t] for t in texts])


def _multi_positive(logits: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """Mean over rows that have a positive of -log(softmax mass on the positives)."""
    rows = positive.any(dim=1)
    log_p = F.log_softmax(logits[rows], dim=1)
    return -torch.logsumexp(log_p.masked_fill(~positive[rows], -torch.inf), dim=1).mean()


def contrastive_loss(img: torch.Tensor, texts: list[str], positives: list[str | None],
                     scale: torch.Tensor, device: str, model, tokenizer) -> torch.Tensor:
    """Image->text and text->image loss; image i's right texts are those describing the same
    picture as ``positives[i]`` (``None``: the image only serves as a negative)."""
    txt = F.normalize(model.encode_text(tokenizer(texts).to(device)).float(), dim=-1)
    ids: dict[str, int] = {}
    text_ids = torch.tensor([ids.setdefault(_key(t), len(ids)) for t in texts])
    image_ids = torch.tensor([ids.get(_key(p), -2) if p else -1 for p in positives])
    positive = (image_ids[:, None] == text_ids[None, :]).to(device)
    logits = scale * img @ txt.T
    return (_multi_positive(logits, positive) + _multi_positive(logits.T, positive.T)) / 2


def _clean_batch(pool, captions, step, cfg, rng, gen, device):
    lo = (step * cfg.batch) % len(pool)
    pick = [(lo + i) % len(pool) for i in range(cfg.batch)]
    caps = [captions[i] for i in pick]
    texts = caps + [n for c in caps for n in hard_negatives(c, rng)]
    images = _augment(clip_pixels(pool[pick], device), gen)
    return images, texts, caps


def _build(out: Path, device: str):
    import open_clip

    target = out / CLIP_MODEL_NAME
    target.mkdir(parents=True, exist_ok=True)
    config_path = target / f"{CLIP_MODEL_NAME}.json"
    config_path.write_text(json.dumps(CLIP_CONFIG, indent=2) + "\n")
    register_clip_config(config_path)
    model = open_clip.create_model(CLIP_MODEL_NAME).to(device)
    return model, _Tokens(open_clip.get_tokenizer(CLIP_MODEL_NAME)), target


def _train(model, tokenizer, cfg: ClipTrainConfig, device: str, steps: int, lr: float,
           extra=None, phase: str = "clean", workers: int = 1,
           seconds: float | None = None, min_steps: int | None = None) -> dict:
    """``steps`` steps, or with ``seconds`` as many as fit (:class:`.steps.StepPlan`), at least
    ``min_steps`` (default: the warm-up); returns the loop's summary."""
    began = time.monotonic()
    pool, captions = render_pool(range(cfg.seed_offset, cfg.seed_offset + cfg.pool_size),
                                 workers)
    if seconds is not None:
        seconds -= time.monotonic() - began
    opt = adamw(model.parameters(), lr, 0.05, device)
    plan = StepPlan(steps, min(cfg.warmup, steps // 10), device, seconds,
                    min_steps=min(steps, cfg.warmup) if min_steps is None else min_steps)
    gen = torch.Generator(device).manual_seed(cfg.seed + 1)
    rng = random.Random(cfg.seed)
    start = time.monotonic()
    model.train()
    step = 0
    while step < plan.total:
        for group in opt.param_groups:
            group["lr"] = lr * plan.lr_factor(step)
        images, texts, positives = _clean_batch(pool, captions, step, cfg, rng, gen, device)
        with autocast(device):
            img = F.normalize(model.encode_image(images).float(), dim=-1)
            scale = model.logit_scale.exp()
            loss = contrastive_loss(img, texts, positives, scale, device, model, tokenizer)
            if extra is not None:
                loss = loss + extra(model, step, rng, gen, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        plan.after_step(step)
        if step % 500 == 0 or step == plan.total - 1:
            logger.info("clip %s step %d/%d loss %.4f scale %.1f (%.0fs)", phase, step,
                        plan.total, loss.item(), scale.item(), time.monotonic() - start)
        step += 1
    return plan.summary()


def _save(model, target: Path) -> Path:
    from safetensors.torch import save_file

    # fp16 halves the file; open_clip casts back to the model's fp32 when it loads the state.
    # Integer buffers (batch norm's count) stay as they are.
    state = {k: (v.detach().half() if v.is_floating_point() else v.detach()).cpu().contiguous()
             for k, v in model.state_dict().items()}
    save_file(state, str(target / CHECKPOINT_NAME))
    return target


def pretrain(out: Path, cfg: ClipTrainConfig, device: str, workers: int = 1,
             seconds: float | None = None) -> Path:
    """Phase 1 on clean renders; writes ``out/shapes-clip`` (usable on its own)."""
    torch.manual_seed(cfg.seed)
    model, tokenizer, target = _build(out, device)
    loops = {"clip_clean": _train(model, tokenizer, cfg, device, cfg.steps, cfg.lr,
                                  workers=workers, seconds=seconds)}
    (target / LOOPS_FILE).write_text(json.dumps(loops))
    return _save(model, target)


def finetune(out: Path, cfg: ClipTrainConfig, mined, images: np.ndarray, device: str,
             workers: int = 1, seconds: float | None = None) -> Path:
    """Phase 2: continue from ``out/shapes-clip`` with the mined generated images; ``seconds``
    can lengthen it beyond ``cfg.finetune_steps``, never shorten it (this phase is what the
    selection AUC comes from)."""
    import open_clip

    torch.manual_seed(cfg.seed + 7)
    model, tokenizer, target = _build(out, device)
    # open_clip's own loading path, as the evaluators take it (fp16 copies into fp32 params).
    open_clip.load_checkpoint(model, str(target / CHECKPOINT_NAME), device=device)
    groups = mined.groups()

    def extra(model, step, rng, gen, scale):
        chosen = [groups[(step * cfg.finetune_groups + i) % len(groups)]
                  for i in range(cfg.finetune_groups)]
        rows = [i for g in chosen for i in g]
        img = F.normalize(model.encode_image(_augment(clip_pixels(images[rows], device), gen))
                          .float(), dim=-1)
        # Image->text: passed images name their prompt, failed ones what the checker read.
        texts = sorted({mined.prompts[i] for i in rows}
                       | {mined.readings[i] for i in rows if mined.readings[i]})
        positives = [mined.prompts[i] if mined.correct[i] else mined.readings[i] for i in rows]
        loss = contrastive_loss(img, texts, positives, scale, device, model, tokenizer)
        # Selection: each prompt must rank its passed images above its failed ones.
        prompts = [mined.prompts[g[0]] for g in chosen]
        txt = F.normalize(model.encode_text(tokenizer(prompts).to(device)).float(), dim=-1)
        selection = []
        offset = 0
        for j, g in enumerate(chosen):
            passed = torch.tensor([mined.correct[i] for i in g], device=device)
            if passed.any() and not passed.all():
                logits = scale * img[offset:offset + len(g)] @ txt[j]
                selection.append(_multi_positive(logits[None], passed[None]))
            offset += len(g)
        if selection:
            loss = loss + torch.stack(selection).mean()
        return loss

    loops = json.loads((target / LOOPS_FILE).read_text()) if (target / LOOPS_FILE).exists() else {}
    loops["clip_hard_negatives"] = _train(model, tokenizer, cfg, device, cfg.finetune_steps,
                                          cfg.finetune_lr, extra, phase="hard-negative",
                                          workers=workers, seconds=seconds,
                                          min_steps=cfg.finetune_steps)
    (target / LOOPS_FILE).write_text(json.dumps(loops))
    return _save(model, target)
