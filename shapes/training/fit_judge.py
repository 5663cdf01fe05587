"""Does blending ``shapes-vqa`` with ``shapes-clip`` rank better than ``shapes-vqa`` alone?

    python -m genloop.shapes.training.fit_judge --data DIR [--weights FILE] [--threads 2]

On the validation prompts of a ``train_vqa`` pool (held out of the judge's training, labelled by
the checker), fits a logistic regression of "all correct" on the two judges' scores (one weight
each, plus a bias) and reports mean within-prompt AUC of each judge and of the blend
``w_vqa * shapes-vqa + w_clip * shapes-clip`` (the weights as a ``composite`` evaluator takes
them), the blend's AUC cross-fitted over two halves of the prompts so it is not graded on the
images it was fitted to.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from genloop.shapes.scene import parse_caption

from .mining import verdict
from .train_vqa import VqaTrainConfig, split_images
from .vqa_data import load_or_draw


def within_prompt_auc(scores: np.ndarray, correct: np.ndarray, groups: np.ndarray) -> float:
    """Mean over groups with both verdicts of P(correct outscores wrong), ties half."""
    aucs = []
    for g in np.unique(groups):
        s, c = scores[groups == g], correct[groups == g]
        pos, neg = s[c], s[~c]
        if len(pos) and len(neg):
            aucs.append((pos[:, None] > neg).mean() + 0.5 * (pos[:, None] == neg).mean())
    return float(np.mean(aucs)) if aucs else float("nan")


def fit_weights(x: np.ndarray, y: np.ndarray, steps: int = 2000) -> np.ndarray:
    """Logistic regression weights (no bias returned) of ``y`` on standardised ``x``, mapped
    back to the raw scores' units."""
    mean, std = x.mean(0), x.std(0) + 1e-9
    xs = torch.from_numpy((x - mean) / std).float()
    w = torch.zeros(x.shape[1] + 1, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=steps)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            xs @ w[:-1] + w[-1], torch.from_numpy(y).float())
        loss.backward()
        return loss

    opt.step(closure)
    return w[:-1].detach().numpy() / std


def main(argv: list[str] | None = None) -> None:
    from genloop.evaluators import get_evaluator
    from genloop.evaluators.vqa import ShapesVqa

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--weights", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = VqaTrainConfig()
    pool, images = load_or_draw(args.data, cfg.data)
    full = cfg.data.prompts * cfg.data.full_seeds
    prompt_of = np.asarray([i // cfg.data.full_seeds if i < full
                            else (i - full) // cfg.data.draft_seeds for i in range(len(images))])
    rows = np.flatnonzero(split_images(cfg.data.prompts, list(prompt_of), cfg))
    vqa, clip = ShapesVqa(args.weights), get_evaluator("shapes-clip", "cpu")
    scores: dict[str, list[float]] = {"shapes-vqa": [], "shapes-clip": []}
    correct = []
    for i in rows:
        image, caption = Image.fromarray(images[i]), pool.captions[i]
        scores["shapes-vqa"] += vqa.score([image], caption).values
        scores["shapes-clip"] += clip.score([image], caption).values
        correct.append(verdict(parse_caption(caption), image).correct)
    x = np.stack([scores["shapes-vqa"], scores["shapes-clip"]], axis=1)
    y, groups = np.asarray(correct), prompt_of[rows]
    weights = fit_weights(x, y.astype(float))
    half = groups % 2 == 0
    blend = np.zeros(len(y))
    for part in (half, ~half):
        w = fit_weights(x[~part], y[~part].astype(float))
        blend[part] = x[part] @ w
    print(json.dumps({
        "images": len(y), "prompts": len(np.unique(groups)), "correct": float(y.mean()),
        "auc": {name: within_prompt_auc(np.asarray(v), y, groups) for name, v in scores.items()},
        "blend_auc_crossfit": within_prompt_auc(blend, y, groups),
        "weights": {"shapes-vqa": 1.0, "shapes-clip": float(weights[1] / weights[0])},
    }, indent=2))


if __name__ == "__main__":
    main()
