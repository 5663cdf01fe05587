"""Retrain the whole shapes world, seeded: generator, then hard-negative mining, then shapes-clip.

    python -m genloop.shapes.training.train --out DIR [--device cpu|cuda] [--smoke] [--estimate]
        [--recipe cpu|gpu] [--budget-seconds S] [--clip-only]

1. The generator (:mod:`.train_sd`) and shapes-clip's clean phase (:mod:`.train_clip`) are
   independent, so they train at once, each in a process of its own (one core each on a 2-core
   CPU; side by side on one GPU).
2. The new generator draws images for training prompts; the checker labels them (:mod:`.mining`).
3. shapes-clip continues on clean data plus those hard negatives.

Writes ``DIR/shapes-sd`` and ``DIR/shapes-clip`` (drop-in replacements for the shipped
``weights/`` folders) and ``DIR/train-report.json`` (seconds per stage, the mining pass rate).
``--clip-only`` retrains shapes-clip alone (clean phase, mining, fine-tuning) against the
generator already in ``DIR/shapes-sd`` (copy the shipped one there): a new verifier recipe for
the same generator, without the generator's share of the run.
``--recipe gpu`` takes :meth:`.train_sd.SDTrainConfig.gpu` (GPU-sized batches and pool, a
wider-reaching UNet); ``--budget-seconds`` makes every training loop run as many steps as fit:
:data:`.estimate.FIRST_PHASE_SHARE` of the budget for the generator (beside clean CLIP), the
rest, after mining, for the hard-negative fine-tuning. ``--estimate`` instead times a few steps
of every stage at full batch size and extrapolates the full run on this machine, in CPU seconds
of one thread (so a busy shared machine does not inflate it). Imports torch, diffusers,
transformers, open_clip and genloop's shapes world, none of the service stack (Dramatiq, Redis,
FastAPI), so it runs where those are not installed.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from .estimate import FIRST_PHASE_SHARE, estimate
from .mining import Mined, MiningConfig
from .steps import LOOPS_FILE
from .train_clip import ClipTrainConfig
from .train_sd import SDTrainConfig

logger = logging.getLogger(__name__)
STAGES = Path(".stages")


class TrainReport(BaseModel):
    device: str
    seconds: dict[str, float]
    mined_images: int
    mined_pass_rate: float
    #: Per training loop: steps run and, when budgeted, measured seconds per step.
    loops: dict[str, dict[str, float | None]]
    configs: dict[str, dict]


def _configs(smoke: bool, seed: int,
             recipe: str = "cpu") -> tuple[SDTrainConfig, ClipTrainConfig, MiningConfig]:
    sd = SDTrainConfig.smoke() if smoke else (
        SDTrainConfig.gpu() if recipe == "gpu" else SDTrainConfig())
    clip = ClipTrainConfig.smoke() if smoke else ClipTrainConfig()
    mining = MiningConfig.smoke() if smoke else MiningConfig()
    return sd.model_copy(update={"seed": seed}), clip.model_copy(update={"seed": seed}), mining


def _run_stage(stage: str, args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(args.seed)
    sd, clip, _ = _configs(args.smoke, args.seed, args.recipe)
    if stage == "generator":
        from .train_sd import train_generator

        train_generator(args.out, sd, args.device, args.workers, args.stage_seconds)
    elif stage == "clip":
        from .train_clip import pretrain

        pretrain(args.out, clip, args.device, args.workers, args.stage_seconds)


#: The first phase's stages and the model folder each writes.
STAGE_MODELS = {"generator": "shapes-sd", "clip": "shapes-clip"}


def _stages(args: argparse.Namespace) -> tuple[str, ...]:
    return ("clip",) if args.clip_only else tuple(STAGE_MODELS)


def _first_phase(args: argparse.Namespace) -> None:
    if args.budget_seconds is not None:
        args.stage_seconds = FIRST_PHASE_SHARE * args.budget_seconds
    stages = _stages(args)
    if len(stages) == 1 or not args.parallel:
        for stage in stages:
            _run_stage(stage, args)
        return
    common = ["--out", str(args.out), "--device", args.device, "--seed", str(args.seed),
              "--threads", str(args.threads), "--workers", str(args.workers),
              "--recipe", args.recipe]
    common += ["--smoke"] if args.smoke else []
    if args.stage_seconds is not None:
        common += ["--stage-seconds", str(args.stage_seconds)]
    procs = {stage: subprocess.Popen([sys.executable, "-m", f"{__package__}.train", *common,
                                      "--stage", stage])
             for stage in stages}
    failed = [stage for stage, proc in procs.items() if proc.wait() != 0]
    if failed:
        raise SystemExit(f"training failed: {', '.join(failed)}")


def _mine(args: argparse.Namespace, cfg: MiningConfig) -> tuple[Mined, np.ndarray]:
    from diffusers import StableDiffusionPipeline

    from .mining import mine

    pipe = StableDiffusionPipeline.from_pretrained(str(args.out / "shapes-sd")).to(args.device)
    pipe.set_progress_bar_config(disable=True)
    mined, images = mine(pipe, cfg, args.workers)
    stages = args.out / STAGES
    stages.mkdir(exist_ok=True)
    (stages / "mined.json").write_text(mined.model_dump_json())
    np.save(stages / "mined.npy", images)
    return mined, images


def train_all(args: argparse.Namespace) -> TrainReport:
    import torch

    from .train_clip import finetune

    sd, clip, mining = _configs(args.smoke, args.seed, args.recipe)
    seconds: dict[str, float] = {}
    began = time.monotonic()
    _first_phase(args)
    seconds["generator+clip_clean" if "generator" in _stages(args) else "clip_clean"] = (
        time.monotonic() - began)
    torch.set_num_threads(args.mining_threads)
    t = time.monotonic()
    mined, images = _mine(args, mining)
    seconds["mining"] = time.monotonic() - t
    t = time.monotonic()
    torch.manual_seed(args.seed)
    left = None
    if args.budget_seconds is not None:
        left = max(10.0, args.budget_seconds - (time.monotonic() - began))
    finetune(args.out, clip, mined, images, args.device, args.workers, left)
    seconds["clip_hard_negatives"] = time.monotonic() - t
    shutil.rmtree(args.out / STAGES)
    seconds["total"] = time.monotonic() - began
    loops: dict = {}
    for stage in _stages(args):
        path = args.out / STAGE_MODELS[stage] / LOOPS_FILE
        loops.update(json.loads(path.read_text()))
        path.unlink()
    configs = {"clip": clip.model_dump(), "mining": mining.model_dump()}
    if "generator" in _stages(args):
        configs["sd"] = sd.model_dump()
    report = TrainReport(device=args.device, seconds=seconds, mined_images=len(mined.prompts),
                         mined_pass_rate=mined.pass_rate, loops=loops, configs=configs)
    (args.out / "train-report.json").write_text(report.model_dump_json(indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="a few tiny steps, for tests")
    parser.add_argument("--estimate", action="store_true",
                        help="time a few steps of each stage and extrapolate the full run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--mining-threads", type=int, default=2,
                        help="torch threads for mining and fine-tuning (one process)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes that render training images and run the checker")
    parser.add_argument("--sequential", dest="parallel", action="store_false",
                        help="train generator and clean CLIP one after the other, in-process")
    parser.add_argument("--recipe", choices=["cpu", "gpu"], default="cpu",
                        help="configuration: the CPU one, or GPU-sized batches and pool")
    parser.add_argument("--budget-seconds", type=float, default=None,
                        help="fit every training loop's steps into this many seconds in all")
    parser.add_argument("--clip-only", action="store_true",
                        help="retrain shapes-clip alone against the generator in OUT/shapes-sd")
    parser.add_argument("--stage", choices=list(STAGE_MODELS), help=argparse.SUPPRESS)
    parser.add_argument("--stage-seconds", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.clip_only and not (args.out / "shapes-sd" / "model_index.json").exists():
        parser.error(f"--clip-only mines the generator in {args.out / 'shapes-sd'}, and there "
                     "is none: copy one there (the shipped one is "
                     "genloop/shapes/weights/shapes-sd)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True  # fixed shapes: pick each convolution's fastest
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage:
        _run_stage(args.stage, args)
    elif args.estimate:
        print(estimate(args.device, recipe=args.recipe,
                       budget_seconds=args.budget_seconds).model_dump_json(indent=2))
    else:
        print(train_all(args).model_dump_json(indent=2))


if __name__ == "__main__":
    main()
