"""Train ``shapes-reader``: predict the pixel checker's reading of the generator's own images.

    python -m genloop.shapes.training.train_reader --out DIR [--data DIR] [--seed N] [--smoke]
        [--threads 2]

Images are ``shapes-vqa``'s kind of pool (:func:`.vqa_data.load_or_draw`: the shipped
generator's training-mix prompts at full steps and as 4-step drafts, from a seed range of its
own; ``--data`` reuses one already drawn), plus clean renders of training seeds (what a perfect
generator would draw) and drawings on the checker's boundaries (:mod:`.boundary`: outlines
between two shape kinds, specks, objects that touch), so the reader learns where the
checker's lines lie, not only what lies far from them. Each image is also mirrored
left-right, which keeps every shape and moves only places; mirrored images are read again by
the checker rather than relabelled by rule. Labels are the checker's readings
(:func:`genloop.evaluators.reader_model.targets`), whatever the prompt asked; an image in
which the checker reads a held-out colour-shape pair (a generator's mistake) is dropped, so no
held-out pair reaches the reader, not even by accident. Cross-entropy per head; writes
``DIR/shapes-reader/model.safetensors`` (``model-N.safetensors`` for ``--seed N`` other than 0;
fp16, config in its metadata) and ``DIR/reader-report.json`` (per-head accuracy on prompts held
out of training). The judge reads every ``*.safetensors`` of its weights folder as one reader
(:class:`~genloop.evaluators.reader_model.ReaderMembers`): the shipped one is seeds 0, 1 and
2 (``--seed N --data`` reuses the first run's pool).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from pydantic import BaseModel, Field
from safetensors.torch import save_file

from genloop.evaluators.reader_model import (
    HEAD_NAMES,
    HEAD_SLICES,
    IGNORE,
    ReaderNet,
    loss,
    targets,
)
from genloop.evaluators.vqa_model import to_batch as net_batch
from genloop.evaluators.vqa_model import to_pixels
from genloop.shapes.checker import read
from genloop.shapes.dataset import HELDOUT_COMBOS, render_pool

from .boundary import boundary_pool
from .vqa_data import VqaDataConfig, load_or_draw

logger = logging.getLogger(__name__)
WEIGHTS_FILE = "model.safetensors"


class ReaderTrainConfig(BaseModel):
    #: training seeds that neither mining, shapes-vqa (720,000,000 on) nor any pool uses
    data: VqaDataConfig = Field(default_factory=lambda: VqaDataConfig(seed_offset=740_000_000))
    #: clean v2 renders from training seeds (0 for none)
    renders: int = 2000
    render_seed_offset: int = 760_000_000
    #: drawings on the checker's boundaries (:mod:`.boundary`; 0 for none)
    boundary: int = 3000
    boundary_seed_offset: int = 780_000_000
    steps: int = 3000
    batch: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    width: int = 64
    hidden: int = 256
    squeeze: int = 24
    #: share of prompts whose images only validate
    valid_share: float = 0.05
    seed: int = 0

    @classmethod
    def smoke(cls) -> ReaderTrainConfig:
        return cls(data=VqaDataConfig.smoke(), renders=4, boundary=4, steps=3, batch=4, width=16,
                   hidden=16, squeeze=8, valid_share=0.25)


class ReaderReport(BaseModel):
    seconds: float
    images: int
    dropped_heldout: int
    #: validation accuracy per head, over the images whose reading answers it
    valid_accuracy: dict[str, float]
    config: dict


class Labelled(BaseModel, arbitrary_types_allowed=True):
    """Net inputs and the checker's answers, row for row."""

    pixels: np.ndarray  # uint8 (N, 64, 64, 3)
    labels: np.ndarray  # int64 (N, len(HEADS))
    group: np.ndarray  # int64 (N,): the prompt (or render) an image belongs to
    dropped: int = 0


def label(images: np.ndarray, groups: list[int]) -> Labelled:
    """Each image and its mirror, read by the checker; held-out pairs dropped."""
    pixels, labels, group, dropped = [], [], [], 0
    for array, g in zip(images, groups, strict=True):
        for im in (Image.fromarray(array), Image.fromarray(array[:, ::-1].copy())):
            reading = read(im)
            if any((o.thing.colour, o.thing.shape) in HELDOUT_COMBOS for o in reading.objects):
                dropped += 1
                continue
            pixels.append(to_pixels(im))
            labels.append(targets(reading))
            group.append(g)
    return Labelled(pixels=np.stack(pixels), labels=np.stack(labels), group=np.asarray(group),
                    dropped=dropped)


def gather(cfg: ReaderTrainConfig, data: Path, device: str = "cpu") -> Labelled:
    """The generated pool (groups: its prompts), the renders and the boundary drawings
    (groups after them, in that order)."""
    began = time.monotonic()
    pool, images = load_or_draw(data, cfg.data, device)
    full = cfg.data.prompts * cfg.data.full_seeds
    prompt_of = [i // cfg.data.full_seeds if i < full else (i - full) // cfg.data.draft_seeds
                 for i in range(len(images))]
    parts = [label(images, prompt_of)]
    if cfg.renders:
        rendered, _ = render_pool(range(cfg.render_seed_offset,
                                        cfg.render_seed_offset + cfg.renders))
        parts.append(label(rendered, [cfg.data.prompts + i for i in range(cfg.renders)]))
    if cfg.boundary:
        drawn = boundary_pool(range(cfg.boundary_seed_offset,
                                    cfg.boundary_seed_offset + cfg.boundary))
        first = cfg.data.prompts + cfg.renders
        parts.append(label(drawn, [first + i for i in range(cfg.boundary)]))
    logger.info("labelled %d images (%.0fs)", sum(len(p.group) for p in parts),
                time.monotonic() - began)
    return Labelled(**{k: np.concatenate([getattr(p, k) for p in parts])
                       for k in ("pixels", "labels", "group")},
                    dropped=sum(p.dropped for p in parts))


def valid_rows(group: np.ndarray, cfg: ReaderTrainConfig) -> np.ndarray:
    """The last ``valid_share`` of prompts, of renders and of boundary drawings validate, all
    their images."""
    valid = np.zeros(len(group), dtype=bool)
    start = 0
    for size in (cfg.data.prompts, cfg.renders, cfg.boundary):
        cut = start + size - (max(1, round(cfg.valid_share * size)) if size else 0)
        valid |= (group >= cut) & (group < start + size)
        start += size
    return valid


def train(cfg: ReaderTrainConfig, data: Labelled, valid: np.ndarray,
          device: str = "cpu") -> tuple[ReaderNet, ReaderReport]:
    began = time.monotonic()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    net = ReaderNet(cfg.width, cfg.hidden, cfg.squeeze).to(device)
    pixels = net_batch(data.pixels)
    labels = torch.from_numpy(data.labels)
    rows = np.flatnonzero(~valid)
    optimiser = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, cfg.lr, total_steps=cfg.steps,
                                                   pct_start=0.05)
    net.train()
    for step in range(cfg.steps):
        chosen = torch.from_numpy(rng.choice(rows, cfg.batch))
        value = loss(net(pixels[chosen].to(device)), labels[chosen].to(device))
        optimiser.zero_grad(set_to_none=True)
        value.backward()
        optimiser.step()
        schedule.step()
        if step % 250 == 0 or step == cfg.steps - 1:
            logger.info("step %d loss %.4f (%.0fs)", step, value.item(), time.monotonic() - began)
    net.eval()
    held = np.flatnonzero(valid)
    predicted = predict(net, data.pixels[held], device)
    truth = data.labels[held]
    accuracy = {name: float((predicted[answered, k] == truth[answered, k]).mean())
                for k, name in enumerate(HEAD_NAMES)
                if (answered := truth[:, k] != IGNORE).any()}
    return net, ReaderReport(seconds=time.monotonic() - began, images=len(data.group),
                             dropped_heldout=data.dropped, valid_accuracy=accuracy,
                             config=cfg.model_dump())


@torch.no_grad()
def predict(net: ReaderNet, pixels: np.ndarray, device: str = "cpu",
            chunk: int = 512) -> np.ndarray:
    """int64 ``(N, len(HEADS))``: each head's most likely class."""
    out = []
    for lo in range(0, len(pixels), chunk):
        logits = net(net_batch(pixels[lo:lo + chunk]).to(device)).cpu()
        out.append(torch.stack([logits[:, HEAD_SLICES[n]].argmax(-1) for n in HEAD_NAMES], 1))
    return torch.cat(out).numpy()


def save(net: ReaderNet, directory: Path, seed: int = 0) -> Path:
    """fp16 weights with the net's config in the file's metadata, named by the training seed
    (members of one reader sit side by side in ``directory``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (WEIGHTS_FILE if seed == 0 else WEIGHTS_FILE.replace(".", f"-{seed}.", 1))
    state = {k: v.detach().half().contiguous().cpu() for k, v in net.state_dict().items()}
    save_file(state, str(path), metadata={"config": json.dumps(net.config)})
    return path


def run(out: Path, cfg: ReaderTrainConfig, data: Path | None = None,
        device: str = "cpu") -> ReaderReport:
    """Draw or load the pool, label it, train, save weights and report under ``out``."""
    labelled = gather(cfg, data or out / "data", device)
    net, report = train(cfg, labelled, valid_rows(labelled.group, cfg), device)
    save(net, out / "shapes-reader", cfg.seed)
    (out / "reader-report.json").write_text(report.model_dump_json(indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None,
                        help="where the drawn pool is cached (default OUT/data)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None,
                        help="the net's initialisation and batch order (default 0)")
    parser.add_argument("--smoke", action="store_true", help="a tiny pool and 3 steps, for tests")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    cfg = ReaderTrainConfig.smoke() if args.smoke else ReaderTrainConfig()
    if args.steps is not None:
        cfg = cfg.model_copy(update={"steps": args.steps})
    if args.seed is not None:
        cfg = cfg.model_copy(update={"seed": args.seed})
    print(run(args.out, cfg, args.data, args.device).model_dump_json(indent=2))


if __name__ == "__main__":
    main()
