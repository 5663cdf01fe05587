"""Shapes VAE recipes side by side: the generator's ceiling (held-out round trips) per CPU minute.

    python benchmarks/shapes_vae.py [--variants v2-run,recipe,...] [--steps 1500]
        [--pool 4096] [--n 200] [--json]

Each variant is :class:`~genloop.shapes.training.train_sd.SDTrainConfig` with a few VAE fields
changed; all train from the same seeded pool for the same steps (unless the variant sets its
own), then encode and decode the same held-out renders
(:func:`~genloop.shapes.training.evaluate.evaluate_vae`: the checker's clause rates, one and two
objects). Prints, per variant, CPU minutes of training (this thread's, so a busy machine does not
inflate them) and each clause's rate with its 95% Wilson interval and its change against the
first variant. Run under ``nice -n 19`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from genloop.shapes.dataset import render_pool
from genloop.shapes.training.evaluate import evaluate_vae, wilson
from genloop.shapes.training.train_sd import SDTrainConfig, train_vae

#: Name -> SDTrainConfig fields changed from the defaults.
VARIANTS: dict[str, dict] = {
    # The VAE of the v2 run: one random crop corner per batch, plain L1 + MSE.
    "v2-run": {"vae_crop_on_objects": False, "vae_foreground_weight": 0.0,
               "vae_edge_weight": 0.0, "vae_lr": 1e-3},
    "objects": {"vae_foreground_weight": 0.0, "vae_edge_weight": 0.0, "vae_lr": 1e-3},
    "foreground": {"vae_crop_on_objects": False, "vae_edge_weight": 0.0,
                   "vae_foreground_weight": 4.0, "vae_lr": 1e-3},
    # The first recipe: crops on the objects, outlines weighted 5x, an edge loss.
    "recipe-5x": {"vae_foreground_weight": 4.0, "vae_lr": 1e-3},
    "recipe-5x-lr2e-3": {"vae_foreground_weight": 4.0},
    "recipe-11x-lr1e-3": {"vae_lr": 1e-3},
    # The defaults: outlines weighted 11x, learning rate 2e-3.
    "recipe": {},
}


def run_variant(name: str, steps: int | None, pool, n: int, save: Path | None = None) -> dict:
    fields = dict(VARIANTS[name])
    if steps is not None:
        fields.setdefault("vae_steps", steps)
    cfg = SDTrainConfig(**fields)
    began = time.thread_time()
    vae = train_vae(cfg, pool, "cpu")
    cpu_minutes = (time.thread_time() - began) / 60
    if save is not None:
        vae.save_pretrained(save / name)
    return {"variant": name, "steps": cfg.vae_steps, "fields": VARIANTS[name],
            "cpu_minutes": round(cpu_minutes, 2), "n": n, "roundtrip": evaluate_vae(vae, n)}


def _row(result: dict, base: dict | None) -> str:
    lines = [f"{result['variant']:<12} {result['steps']:>5} steps "
             f"{result['cpu_minutes']:5.1f} CPU min"]
    for label, rates in result["roundtrip"].items():
        cells = []
        for key, p in rates.items():
            lo, hi = wilson(p, result["n"])
            delta = "" if base is None else f" {p - base['roundtrip'][label][key]:+.3f}"
            cells.append(f"{key} {p:.3f} [{lo:.2f}, {hi:.2f}]{delta}")
        lines.append(f"  {label}: " + "; ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="v2-run,recipe",
                        help=f"comma-separated, the first the baseline: {', '.join(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--pool", type=int, default=4096, help="training images rendered")
    parser.add_argument("--n", type=int, default=200, help="held-out renders per object count")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", type=Path, default=None,
                        help="write each variant's VAE to SAVE/<variant> (for shapes_unet.py)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pool, _ = render_pool(range(args.pool))
    results = [run_variant(name, args.steps, pool, args.n, args.save)
               for name in args.variants.split(",")]
    if args.json:
        print(json.dumps(results))
        return
    for result in results:
        print(_row(result, None if result is results[0] else results[0]))


if __name__ == "__main__":
    main()
