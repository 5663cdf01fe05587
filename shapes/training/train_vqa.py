"""Train ``shapes-vqa``: yes/no answers to clause questions, learnt from the checker's verdicts.

    python -m genloop.shapes.training.train_vqa --out DIR [--data DIR] [--smoke] [--threads 2]

Draws (or reuses, from ``--data``) the generator's images and labels their questions
(:mod:`.vqa_data`), trains :class:`~genloop.evaluators.vqa_model.VqaNet` with binary
cross-entropy, and writes ``DIR/shapes-vqa/model.safetensors`` (fp16, with its config; the
shipped folder is ``genloop/shapes/weights/shapes-vqa``) and ``DIR/vqa-report.json``
(validation accuracy on prompts held out of training). A batch is 64 images with 32 questions
each, a quarter of them about the image's own caption: those are what the judge is asked, the
rest (variants, mostly "no") teach it what a wrong clause looks like. For two objects, each
context group of a question is dropped with probability ``context_drop``, so the model learns
to find an object by more than one cue (its colour, its partner, the relation) and a colour
it has never seen with that shape does not lose it.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, Field
from safetensors.torch import save_file

from genloop.evaluators.vqa_model import CONTEXT_SLICES, VqaNet, to_batch

from .vqa_data import Questions, VqaDataConfig, label_pool, load_or_draw

logger = logging.getLogger(__name__)
WEIGHTS_FILE = "model.safetensors"


class VqaTrainConfig(BaseModel):
    data: VqaDataConfig = Field(default_factory=VqaDataConfig)
    steps: int = 1500
    batch_images: int = 64
    questions_per_image: int = 32
    own_share: float = 0.25
    lr: float = 2e-3
    weight_decay: float = 0.01
    context_drop: float = 0.2
    width: int = 64
    heads: int = 4
    layers: int = 2
    #: share of prompts whose images only validate
    valid_share: float = 0.05
    seed: int = 0

    @classmethod
    def smoke(cls) -> VqaTrainConfig:
        return cls(data=VqaDataConfig.smoke(), steps=3, batch_images=4, questions_per_image=8,
                   width=16, heads=2, layers=1, valid_share=0.25)


class VqaReport(BaseModel):
    seconds: float
    images: int
    questions: int
    #: validation: accuracy of own-caption questions and of all, at P(yes) = 0.5
    valid_own_accuracy: float
    valid_accuracy: float
    config: dict


def split_images(n_prompts: int, per_prompt_rows: list[int], cfg: VqaTrainConfig) -> np.ndarray:
    """Whether each image validates: the last ``valid_share`` of prompts, all their images."""
    cut = n_prompts - max(1, round(cfg.valid_share * n_prompts))
    return np.asarray([p >= cut for p in per_prompt_rows])


def _ranges(rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and count of each image's entries in ``rows`` (sorted by image)."""
    starts = np.searchsorted(rows, np.arange(n))
    return starts, np.searchsorted(rows, np.arange(n), side="right") - starts


def _drop_context(vectors: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    keep = torch.rand(*vectors.shape[:-1], len(CONTEXT_SLICES), generator=gen) >= p
    out = vectors.clone()
    for k, where in enumerate(CONTEXT_SLICES):
        out[..., where] *= keep[..., k:k + 1]
    return out


def train(cfg: VqaTrainConfig, images: np.ndarray, questions: Questions, valid: np.ndarray,
          device: str = "cpu") -> tuple[VqaNet, VqaReport]:
    """Train on the images not in ``valid``; report accuracy on those in it."""
    began = time.monotonic()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    net = VqaNet(cfg.width, cfg.heads, cfg.layers).to(device)
    pixels = to_batch(images)
    vectors = torch.from_numpy(questions.vector)
    labels = torch.from_numpy(questions.label).float()
    starts, counts = _ranges(questions.image, len(images))
    own_rows = np.flatnonzero(questions.own)
    own_starts, own_counts = _ranges(questions.image[own_rows], len(images))
    train_images = np.flatnonzero(~valid & (counts > 0))
    optimiser = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, cfg.lr, total_steps=cfg.steps,
                                                   pct_start=0.05)
    n_own = max(1, round(cfg.own_share * cfg.questions_per_image))
    for step in range(cfg.steps):
        chosen = rng.choice(train_images, cfg.batch_images)
        own = own_rows[own_starts[chosen, None] + (
            rng.random((len(chosen), n_own)) * own_counts[chosen, None]).astype(np.int64)]
        rest = starts[chosen, None] + (rng.random(
            (len(chosen), cfg.questions_per_image - n_own)) * counts[chosen, None]).astype(
            np.int64)
        rows = torch.from_numpy(np.concatenate([own, rest], axis=1))
        asked = _drop_context(vectors[rows], cfg.context_drop, gen)
        logits = net(pixels[torch.from_numpy(chosen)].to(device), asked.to(device))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits,
                                                                    labels[rows].to(device))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 200 == 0 or step == cfg.steps - 1:
            logger.info("step %d loss %.4f (%.0fs)", step, loss.item(), time.monotonic() - began)
    net.eval()
    held = np.isin(questions.image, np.flatnonzero(valid))
    correct = answers(net, images, questions, held, device) == questions.label[held]
    report = VqaReport(
        seconds=time.monotonic() - began, images=len(images), questions=len(questions.label),
        valid_own_accuracy=float(correct[questions.own[held]].mean()) if held.any() else 0.0,
        valid_accuracy=float(correct.mean()) if held.any() else 0.0,
        config=cfg.model_dump())
    return net, report


@torch.no_grad()
def answers(net: VqaNet, images: np.ndarray, questions: Questions, rows: np.ndarray,
            device: str = "cpu", chunk: int = 256) -> np.ndarray:
    """The net's yes (1) or no (0) for the questions selected by boolean ``rows``."""
    picked = np.flatnonzero(rows)
    out = np.zeros(len(picked), dtype=np.uint8)
    for lo in range(0, len(picked), chunk):
        part = picked[lo:lo + chunk]
        pixels = to_batch(images[questions.image[part]]).to(device)
        asked = torch.from_numpy(questions.vector[part]).unsqueeze(1).to(device)
        out[lo:lo + chunk] = (net(pixels, asked)[:, 0] > 0).cpu().numpy()
    return out


def save(net: VqaNet, directory: Path) -> Path:
    """fp16 weights with the net's config in the file's metadata."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / WEIGHTS_FILE
    state = {k: v.detach().half().contiguous().cpu() for k, v in net.state_dict().items()}
    save_file(state, str(path), metadata={"config": json.dumps(net.config)})
    return path


def run(out: Path, cfg: VqaTrainConfig, data: Path | None = None,
        device: str = "cpu") -> VqaReport:
    """Draw or load the pool, label it, train, save weights and report under ``out``."""
    pool, images = load_or_draw(data or out / "data", cfg.data, device)
    questions = label_pool(pool, images)
    # Rows go prompt-major within each of the two blocks (full, then drafts).
    full = cfg.data.prompts * cfg.data.full_seeds
    prompt_of = [i // cfg.data.full_seeds if i < full else (i - full) // cfg.data.draft_seeds
                 for i in range(len(images))]
    valid = split_images(cfg.data.prompts, prompt_of, cfg)
    net, report = train(cfg, images, questions, valid, device)
    save(net, out / "shapes-vqa")
    (out / "vqa-report.json").write_text(report.model_dump_json(indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None,
                        help="where the drawn pool is cached (default OUT/data)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="a tiny pool and 3 steps, for tests")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    cfg = VqaTrainConfig.smoke() if args.smoke else VqaTrainConfig()
    if args.steps is not None:
        cfg = cfg.model_copy(update={"steps": args.steps})
    print(run(args.out, cfg, args.data, args.device).model_dump_json(indent=2))


if __name__ == "__main__":
    main()
