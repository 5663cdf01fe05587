"""Measure shapes-clip and the shapes generator on held-out seeds.

    python -m genloop.workers.shapes.evaluate [--weights DIR] [--n 200] [--guidance 4 ...] [--json]

- CLIP: for each held-out image and each of colour / shape / position / size, does the true
  caption score above every caption that differs from it in that one attribute?
- Generator: for held-out prompts at the given steps and guidance, the share of images in which
  the checker finds each prompted attribute (and all of them).

Both load the models the way the registries do (``from_pretrained`` and open_clip's
``pretrained=``), so the figures describe what genloop actually runs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pydantic import BaseModel

from . import dataset
from .checker import check, compare

ATTRIBUTES = ("colour", "shape", "position", "size")


class ClipReport(BaseModel):
    n: int
    rank_first: dict[str, float]


class VaeReport(BaseModel):
    """The checker on VAE round trips of clean renders: the ceiling for the generator."""

    n: int
    found: dict[str, float]
    all_correct: float


class GeneratorReport(BaseModel):
    n: int
    steps: int
    guidance: float
    found: dict[str, float]
    all_correct: float
    seconds: float


def load_clip(weights: Path):
    import open_clip

    from .models import register_clip_config

    name = register_clip_config(weights / "shapes-clip" / "shapes-clip.json")
    model, _, preprocess = open_clip.create_model_and_transforms(
        name, pretrained=str(weights / "shapes-clip" / "open_clip_model.safetensors"))
    return model.eval(), preprocess, open_clip.get_tokenizer(name)


def evaluate_clip(weights: Path, n: int = 500, start: int = 0) -> ClipReport:
    import torch

    model, preprocess, tokenizer = load_clip(weights)
    samples = [dataset.sample(s) for s in dataset.heldout_seeds(n, start)]
    wins = dict.fromkeys(ATTRIBUTES, 0)
    with torch.no_grad():
        images = torch.stack([preprocess(s.image) for s in samples])
        img = torch.nn.functional.normalize(model.encode_image(images), dim=-1)
        for attribute in ATTRIBUTES:
            for i, s in enumerate(samples):
                variants = dataset.one_attribute_variants(s.attributes, attribute)
                texts = [s.caption] + [v.caption() for v in variants]
                txt = torch.nn.functional.normalize(model.encode_text(tokenizer(texts)), dim=-1)
                scores = txt @ img[i]
                wins[attribute] += int(scores[0] > scores[1:].max())
    return ClipReport(n=n, rank_first={a: wins[a] / n for a in ATTRIBUTES})


def load_pipeline(weights: Path):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(weights / "shapes-sd"))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def evaluate_vae(pipe, n: int = 200, start: int = 0) -> VaeReport:
    import numpy as np
    import torch
    from PIL import Image

    samples = [dataset.sample(s) for s in dataset.heldout_seeds(n, start)]
    pixels = np.stack([dataset.to_array(s.image) for s in samples]) / 127.5 - 1.0
    x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float()
    with torch.no_grad():
        y = pipe.vae.decode(pipe.vae.encode(x).latent_dist.mode()).sample
    out = ((y.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
    matches = [compare(s.attributes, check(Image.fromarray(o)))
               for s, o in zip(samples, out, strict=True)]
    keys = ATTRIBUTES + ("background",)
    return VaeReport(n=n, found={k: sum(getattr(m, k) for m in matches) / n for k in keys},
                     all_correct=sum(m.all_correct for m in matches) / n)


def generate(pipe, prompts: list[str], seeds: list[int], steps: int, guidance: float) -> list:
    import torch

    generators = [torch.Generator().manual_seed(s) for s in seeds]
    return pipe(prompts, num_inference_steps=steps, guidance_scale=guidance,
                generator=generators).images


def evaluate_generator(pipe, n: int = 200, steps: int = 20, guidance: float = 4.0,
                       start: int = 0, batch: int = 50) -> GeneratorReport:
    prompts = dataset.heldout_prompts(n, start)
    counts = dict.fromkeys(ATTRIBUTES + ("background",), 0)
    all_correct = 0
    began = time.monotonic()
    for lo in range(0, n, batch):
        chunk = prompts[lo: lo + batch]
        images = generate(pipe, [p.caption() for p in chunk], list(range(lo, lo + len(chunk))),
                          steps, guidance)
        for attrs, image in zip(chunk, images, strict=True):
            match = compare(attrs, check(image))
            for key in counts:
                counts[key] += int(getattr(match, key))
            all_correct += int(match.all_correct)
    return GeneratorReport(n=n, steps=steps, guidance=guidance,
                           found={k: v / n for k, v in counts.items()},
                           all_correct=all_correct / n, seconds=time.monotonic() - began)


def main(argv: list[str] | None = None) -> None:
    import torch

    from . import DEFAULT_GUIDANCE, DEFAULT_STEPS, weights_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=None, help="default: shipped weights")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--clip-n", type=int, default=500)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--guidance", type=float, nargs="+", default=[DEFAULT_GUIDANCE])
    parser.add_argument("--skip-clip", action="store_true")
    parser.add_argument("--skip-generator", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    weights = args.weights or weights_dir()
    reports: list[BaseModel] = []
    if not args.skip_clip:
        reports.append(evaluate_clip(weights, args.clip_n))
    if not args.skip_generator:
        pipe = load_pipeline(weights)
        reports.append(evaluate_vae(pipe, args.n))
        reports.extend(evaluate_generator(pipe, args.n, args.steps, g) for g in args.guidance)
    for report in reports:
        if args.json:
            print(report.model_dump_json())
        else:
            print(type(report).__name__, json.dumps(report.model_dump(), indent=None))


if __name__ == "__main__":
    main()
