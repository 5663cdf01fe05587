"""Fit an ``ensemble`` of judges on the shapes world, from the checker's verdicts.

    python -m genloop.shapes.training.fit_ensemble [--judges shapes-reader,shapes-clip]
        [--prompts 300] [--seeds 8] [--steps 20] [--draft-steps 4] [--threads 2] [--out FILE]

Training-mix prompts from a seed range of their own (no held-out colour-shape pair, none of
the benchmarks' prompts), ``--seeds`` images each at ``--steps`` and as many drafts at
``--draft-steps`` (what the shapes recipe judges), drawn by the shipped generator through
``Client.local`` and scored by every judge; the pixel checker labels each image, and the
judges never see it. Fits the ensemble (:func:`genloop.evaluators.ensemble.fit`; a group is
one prompt's images at one step count, the candidates a loop ranks together) and reports each
judge's and the ensemble's mean within-prompt AUC, the ensemble's cross-fitted over two halves
of the prompts so that it is not graded on the images it was fitted to. The options an
``ensemble`` takes (``{"weights": {...}, "bias": ...}``) go to ``--out`` as JSON, or are
printed with the report. The defaults draw 4,800 images (about 6 minutes on two cores); a fit
needs prompts whose images are partly right, which a few dozen prompts give.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from genloop import shapes
from genloop.evaluators import get_evaluator
from genloop.evaluators.ensemble import feature, fit, within_prompt_auc
from genloop.sdk import Client, Graph, RunStatus
from genloop.shapes.dataset import training_sample

#: Training seeds of the prompts, a range no model's pool or other judge uses.
SEED_OFFSET = 820_000_000


def draw(client: Client, judges: list[str], prompts: int, seeds: int, steps: int,
         draft_steps: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Each judge's scores, the checker's verdicts and each image's group, image by image."""
    captions = [training_sample(s).caption
                for s in range(SEED_OFFSET, SEED_OFFSET + prompts)]
    runs = []
    for caption in captions:
        g = Graph()
        for node, n_steps in (("full", steps), ("draft", draft_steps)):
            images = g.generate(caption, n=seeds, model=shapes.PIPELINE_NAME, steps=n_steps,
                                id=node)
            for judge in judges:
                g.score(images, text=caption, evaluator=judge, id=f"{node}/{judge}")
        runs.append(client.submit(g))
    scores: dict[str, list[float]] = {j: [] for j in judges}
    correct, groups = [], []
    for k, (caption, run) in enumerate(zip(captions, runs, strict=True)):
        result = run.wait(timeout=3600)
        if result.status != RunStatus.SUCCEEDED:
            raise RuntimeError(f"drawing {caption!r} failed: {result.error}")
        wanted = shapes.parse_caption(caption)
        for half, node in enumerate(("full", "draft")):
            for c in sorted(result.items(node), key=lambda c: c.index):
                image = Image.open(io.BytesIO(client.read_artifact(c.artifact)))
                correct.append(shapes.grade(wanted, image, shapes.world_of(c.width)).all_correct)
                groups.append(2 * k + half)
            for j in judges:
                scores[j] += [c.score for c in sorted(result.items(f"{node}/{j}"),
                                                      key=lambda c: c.index)]
    return ({j: np.asarray(v) for j, v in scores.items()}, np.asarray(correct),
            np.asarray(groups))


def report(judges: list[str], scores: dict[str, np.ndarray], correct: np.ndarray,
           groups: np.ndarray, probability: dict[str, bool]) -> dict:
    """The fitted options, each judge's AUC and the ensemble's, cross-fitted."""
    x = np.stack([feature(scores[j], probability[j]) for j in judges], 1)
    # Only prompts with a right and a wrong image at one step count rank anything: deal those
    # out to the two halves in turn, so that each half has some to fit on.
    mixed = [g // 2 for g in np.unique(groups) if 0 < correct[groups == g].mean() < 1]
    ranked = list(dict.fromkeys(mixed))
    if len(ranked) < 2:
        raise ValueError(f"{len(ranked)} prompt(s) had both a right and a wrong image at one "
                         "step count; fitting and cross-fitting need at least 2")
    weights, bias = fit(x, correct, groups)
    half = np.isin(groups // 2, ranked[::2])
    crossed = np.zeros(len(correct))
    for part in (half, ~half):
        w, _ = fit(x[~part], correct[~part], groups[~part])
        crossed[part] = x[part] @ w
    return {
        "images": len(correct), "prompts": len(np.unique(groups // 2)),
        "correct": float(correct.mean()),
        "auc": {j: within_prompt_auc(scores[j], correct, groups) for j in judges},
        "ensemble_auc_crossfit": within_prompt_auc(crossed, correct, groups),
        "options": {"weights": dict(zip(judges, weights.tolist(), strict=True)), "bias": bias},
    }


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--judges", default="shapes-reader,shapes-clip",
                        help="the judges to combine, comma-separated")
    parser.add_argument("--prompts", type=int, default=300, help="training-mix prompts")
    parser.add_argument("--seeds", type=int, default=8,
                        help="images a prompt, at --steps and as many drafts")
    parser.add_argument("--steps", type=int, default=shapes.DEFAULT_STEPS,
                        help="denoising steps of the full images")
    parser.add_argument("--draft-steps", type=int, default=4, help="denoising steps of a draft")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the ensemble's options here as JSON")
    args = parser.parse_args(argv)
    judges = [j for j in args.judges.split(",") if j]
    if not judges:
        parser.error("name at least one judge")
    torch.set_num_threads(args.threads)
    probability = {j: get_evaluator(j, "cpu").probability for j in judges}
    with tempfile.TemporaryDirectory() as home, Client.local(home=home) as client:
        scores, correct, groups = draw(client, judges, args.prompts, args.seeds, args.steps,
                                       args.draft_steps)
    try:
        out = report(judges, scores, correct, groups, probability)
    except ValueError as exc:
        sys.exit(f"fit_ensemble: {exc}; draw more --prompts or --seeds")
    if args.out is not None:
        args.out.write_text(json.dumps(out["options"], indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
