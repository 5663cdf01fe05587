"""Does a genloop Loop find better images than best-of-N, at the same number of images?

    python benchmarks/loop_quality.py [--prompts 50] [--rounds 3] [--candidates 8] [--json]

On held-out shapes prompts, with the shipped ``shapes`` generator and ``shapes-clip`` judge:

- best-of-N: one round of ``rounds * candidates`` images, the best by CLIP score kept;
- loop: ``rounds`` rounds of ``candidates`` images (refine strategy ``--refiner``).

For the kept image of each prompt it reports the rate at which the ground-truth checker finds
every prompted attribute (not CLIP's opinion), the mean CLIP score, and wall time per mode.
Everything runs through ``Client.local`` like any user program, using the model registry's
``shapes`` and the evaluator registry's ``shapes-clip`` at their defaults.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path

from PIL import Image
from pydantic import BaseModel

from genloop.sdk import Client, Loop
from genloop.workers import shapes


class ModeReport(BaseModel):
    mode: str
    images_per_prompt: int
    all_correct: float
    #: the same rate over every generated image, i.e. with no selection at all
    any_image_all_correct: float
    mean_clip_score: float
    wall_s: float


def _all_correct(client: Client, artifact: str, wanted: shapes.Attributes) -> bool:
    image = Image.open(io.BytesIO(client.read_artifact(artifact)))
    return shapes.compare(wanted, shapes.check(image)).all_correct


def run_mode(client: Client, mode: str, prompts: list[str], rounds: int, candidates: int,
             refiner: str) -> ModeReport:
    began = time.monotonic()
    runs = [
        client.submit(Loop(
            prompt=p, rounds=rounds, candidates=candidates, refiner=refiner, seed=0,
            model=shapes.PIPELINE_NAME, evaluator=shapes.CLIP_MODEL_NAME,
        ))
        for p in prompts
    ]
    correct, scores, every = 0, [], []
    for prompt, run in zip(prompts, runs, strict=True):
        result = run.wait(timeout=1800)
        best = result.best
        if best is None:
            raise RuntimeError(f"run {result.run_id} for {prompt!r} has no best: {result.error}")
        wanted = shapes.parse_caption(prompt)
        correct += int(_all_correct(client, best.artifact, wanted))
        scores.append(best.score)
        every += [_all_correct(client, c.artifact, wanted) for c in result.scored]
    return ModeReport(mode=mode, images_per_prompt=rounds * candidates,
                      all_correct=correct / len(prompts),
                      any_image_all_correct=sum(every) / len(every),
                      mean_clip_score=sum(scores) / len(scores),
                      wall_s=time.monotonic() - began)


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--refiner", default="seed-search")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--workers", type=int, default=2, help="worker threads")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = [a.caption() for a in shapes.heldout_prompts(args.prompts)]
    n_images = args.rounds * args.candidates
    with tempfile.TemporaryDirectory() as home:
        # One home per mode, so neither mode reuses the other's stored images.
        reports = []
        for mode, rounds, candidates in [("best-of-n", 1, n_images),
                                         ("loop", args.rounds, args.candidates)]:
            with Client.local(home=Path(home) / mode, threads=args.workers) as client:
                reports.append(run_mode(client, mode, prompts, rounds, candidates,
                                        args.refiner))
    if args.json:
        print(json.dumps({"prompts": args.prompts, "refiner": args.refiner,
                          "modes": [r.model_dump() for r in reports]}))
    else:
        for r in reports:
            print(f"{r.mode:10s} images/prompt={r.images_per_prompt:3d} "
                  f"all-correct={r.all_correct:.3f} (any image {r.any_image_all_correct:.3f}) "
                  f"clip={r.mean_clip_score:.2f} "
                  f"wall={r.wall_s:.1f}s")


if __name__ == "__main__":
    main()
