"""Shapes UNet recipes side by side at small scale: what buys shape accuracy per CPU minute.

    python benchmarks/shapes_unet.py --vae DIR [--variants v2-run,recipe,...] [--steps 400]
        [--batch 64] [--pool 4096] [--n 200] [--save DIR] [--json]

Every variant is :class:`~genloop.shapes.training.train_sd.SDTrainConfig` with a few UNet fields
changed, trained for the same steps on the same seeded pool, encoded by the same VAE (``--vae``:
a folder ``benchmarks/shapes_vae.py --save`` wrote). Two measures, both on held-out seeds:

- ``shape_preference``: for held-out one-object renders noised at t in [500, 1000) (where the
  text decides what is drawn), the share whose v-prediction loss is lower under the true caption
  than under the same caption with another shape. Chance is 0.5; cheap (forward passes only) and
  far less noisy than generating, so it separates short runs that the checker cannot.
- the checker's clause rates on ``--n`` generated one-object images (20 DDIM steps, guidance 2),
  with 95% Wilson intervals.

CPU minutes are this thread's training time. Run under ``nice -n 19`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from genloop.shapes import DEFAULT_GUIDANCE, DEFAULT_STEPS, dataset
from genloop.shapes.dataset import render_pool
from genloop.shapes.models import UNetShape, build_scheduler, build_tokenizer
from genloop.shapes.scene import one_attribute_variants
from genloop.shapes.training.evaluate import evaluate_generator, wilson
from genloop.shapes.training.train_sd import (
    SDTrainConfig,
    assemble_pipeline,
    to_pixels,
    train_unet,
)

#: Name -> SDTrainConfig fields changed from the defaults (``recipe``: the defaults).
_V2_RUN = {"unet_foreground_weight": 0.0, "unet": UNetShape()}
VARIANTS: dict[str, dict] = {
    "recipe": {},
    # The first v2 run's UNet: plain loss, caption through cross-attention only.
    "v2-run": _V2_RUN,
    "foreground": {"unet": UNetShape()},
    "foreground-lr2e-3": {"unet": UNetShape(), "unet_lr": 2e-3},
    "recipe-attention16": {"unet": UNetShape(text_in_time_embedding=True,
                                             attention_at_16=True)},
    # Training timesteps: uniform (the recipe before 2026-12-01), and logit-normal with other
    # means than the recipe's 1.0 (towards noise is positive).
    "uniform-timesteps": {"unet_timestep_logit": None},
    "logit-normal-centred": {"unet_timestep_logit": (0.0, 1.0)},
    "logit-normal-0.5": {"unet_timestep_logit": (0.5, 1.0)},
    "logit-normal-1.5": {"unet_timestep_logit": (1.5, 1.0)},
    # A shorter EMA horizon (200 steps, not 1,000): a short run's EMA still averages in
    # weights from well before its end.
    "ema-0.995": {"ema_decay": 0.995},
}


@dataclass(frozen=True)
class ShapeProbe:
    """What :func:`shape_preference` feeds every variant: held-out latents noised at one seeded
    noise and timestep each, their v target, and the true and other-shape caption ids. Built
    once: only the text encoder and the UNet differ between variants."""

    noisy: torch.Tensor
    t: torch.Tensor
    v: torch.Tensor
    right: torch.Tensor
    wrong: torch.Tensor

    @classmethod
    def build(cls, vae, tokenizer, n: int) -> ShapeProbe:
        samples = [dataset.sample(s) for s in dataset.heldout_seeds(n, start=70_000)]
        wrong = [one_attribute_variants(s.attributes, "shape")[i % 3].caption()
                 for i, s in enumerate(samples)]
        images = torch.stack([to_pixels(dataset.to_array(s.image)[None])[0] for s in samples])
        scheduler = build_scheduler()
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            latents = vae.encode(images).latent_dist.mean * vae.config.scaling_factor
        noise = torch.randn(latents.shape, generator=g)
        t = torch.randint(500, 1000, (n,), generator=g)

        def ids(captions: list[str]) -> torch.Tensor:
            return tokenizer(captions, padding="max_length", max_length=tokenizer.model_max_length,
                             truncation=True, return_tensors="pt").input_ids

        return cls(scheduler.add_noise(latents, noise, t), t,
                   scheduler.get_velocity(latents, noise, t),
                   ids([s.caption for s in samples]), ids(wrong))


def shape_preference(unet, text_encoder, probe: ShapeProbe) -> float:
    """Share of noised held-out latents whose true caption predicts v better than a caption
    naming another shape (same noise, same timestep)."""
    with torch.no_grad():
        def loss(ids: torch.Tensor) -> torch.Tensor:
            pred = unet(probe.noisy, probe.t,
                        encoder_hidden_states=text_encoder(ids).last_hidden_state)
            return F.mse_loss(pred.sample, probe.v, reduction="none").mean(dim=(1, 2, 3))

        return float((loss(probe.right) < loss(probe.wrong)).float().mean())


def run_variant(name: str, steps: int, batch: int, vae, tokenizer, pool, captions, n: int,
                probe: ShapeProbe, save: Path | None = None) -> dict:
    cfg = SDTrainConfig(unet_steps=steps, unet_batch=batch, **VARIANTS[name])
    began = time.thread_time()
    unet, text_encoder, scheduler = train_unet(cfg, vae, tokenizer, pool, captions, "cpu")
    cpu_minutes = (time.thread_time() - began) / 60
    preference = shape_preference(unet, text_encoder, probe)
    pipe = assemble_pipeline(vae, text_encoder, tokenizer, unet, scheduler)
    pipe.set_progress_bar_config(disable=True)
    if save is not None:
        pipe.save_pretrained(save / name, safe_serialization=True)
    report = evaluate_generator(pipe, dataset.heldout_prompts(n, objects=1), "one",
                                DEFAULT_STEPS, DEFAULT_GUIDANCE)
    return {"variant": name, "steps": steps, "batch": batch, "fields": {k: str(v) for k, v in
                                                        VARIANTS[name].items()},
            "cpu_minutes": round(cpu_minutes, 2), "shape_preference": preference,
            "preference_n": len(probe.t), "n": n,
            "found": report.found, "all_correct": report.all_correct}


def main(argv: list[str] | None = None) -> None:
    from diffusers import AutoencoderKL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vae", type=Path, required=True)
    parser.add_argument("--variants", default="v2-run,recipe",
                        help=f"comma-separated, the first the baseline: {', '.join(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=SDTrainConfig().unet_batch)
    parser.add_argument("--pool", type=int, default=4096, help="training images rendered")
    parser.add_argument("--n", type=int, default=200, help="held-out prompts generated")
    parser.add_argument("--preference-n", type=int, default=256,
                        help="held-out renders for the shape preference")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", type=Path,
                        help="write each variant's pipeline to SAVE/<variant>")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    vae = AutoencoderKL.from_pretrained(str(args.vae)).eval().requires_grad_(False)
    pool, captions = render_pool(range(args.pool))
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tokenizer")
    probe = ShapeProbe.build(vae, tokenizer, args.preference_n)
    results = [run_variant(name, args.steps, args.batch, vae, tokenizer, pool, captions, args.n,
                           probe, args.save)
               for name in args.variants.split(",")]
    if args.json:
        print(json.dumps(results))
        return
    base = results[0]
    for r in results:
        lo, hi = wilson(r["found"]["shape"], r["n"])
        print(f"{r['variant']:<14} {r['steps']:>5} steps {r['cpu_minutes']:5.1f} min  "
              f"shape preference {r['shape_preference']:.3f} "
              f"({r['shape_preference'] - base['shape_preference']:+.3f})  "
              f"generated shape {r['found']['shape']:.3f} [{lo:.3f}, {hi:.3f}]  "
              f"all-correct {r['all_correct']:.3f}  "
              + " ".join(f"{k} {v:.2f}" for k, v in r["found"].items() if k != "shape"))


if __name__ == "__main__":
    main()
