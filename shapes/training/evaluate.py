"""Measure shapes-clip and the shapes generator on held-out seeds and held-out combinations.

    python -m genloop.shapes.training.evaluate [--weights DIR] [--old-weights DIR] [--device cuda]
        [--n 500] [--auc-prompts 100] [--json] [--out FILE]

- CLIP ranking: for each held-out clean render and each clause (one object: colour, shape,
  size, position, background; two: colour, shape, size, relation, order, background), does the
  true caption score above every caption that differs from it in that one clause?
- Generator: for held-out prompts (one and two objects, and prompts with colour-shape
  combinations held out of training), the share of images in which the checker finds each
  clause, and all of them.
- Selection AUC: for held-out prompts, ``k`` generated images each, labelled by the checker;
  per prompt with both kinds, the AUC of the CLIP score separating passed from failed images;
  the mean over prompts. This is what best-of-N selection by the verifier can gain. Computed
  for ``--weights``'s CLIP and, with ``--old-weights``, the old one, on the same images.
- VAE round trip: the same clause rates on held-out renders encoded and decoded by the VAE,
  the generator's ceiling (a low shape rate there is the VAE's fault, not the UNet's).

Models load the way the registries load them (``from_pretrained``, open_clip's ``pretrained=``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from genloop.shapes import dataset, world_of
from genloop.shapes.checker import grade
from genloop.shapes.scene import ATTRIBUTE_NAMES, Attributes, Scene, one_attribute_variants

from .mining import generate, verdicts

_PAIR_GROUPS = {
    "colour": ("first.colour", "second.colour"), "shape": ("first.shape", "second.shape"),
    "size": ("first.size", "second.size"), "relation": ("relation",), "order": ("order",),
    "background": ("background",),
}


class ClipReport(BaseModel):
    n: int
    #: ``one.<clause>`` and ``two.<clause>``: share of renders whose true caption ranks first.
    rank_first: dict[str, float]


class GeneratorReport(BaseModel):
    prompts: str
    n: int
    steps: int
    guidance: float
    found: dict[str, float]
    all_correct: float
    seconds: float


class SelectionReport(BaseModel):
    clip: str
    prompts: int
    images_per_prompt: int
    #: prompts whose images were neither all passed nor all failed (the AUC is over these)
    mixed_prompts: int
    mean_auc: float | None
    pass_rate: float


class ClipModel:
    """An open_clip shapes-clip from a weights folder, registered under a name of its own so
    two versions (v1 32x32, v2 64x64) can be loaded side by side."""

    def __init__(self, weights: Path, name: str, device: str = "cpu") -> None:
        import open_clip

        folder = weights / "shapes-clip"
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / f"{name}.json"
            shutil.copy(folder / "shapes-clip.json", config)
            if name not in open_clip.list_models():
                open_clip.add_model_config(config)
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(
            name, pretrained=str(folder / "open_clip_model.safetensors"), device=device)
        self.model.eval()
        self.tokenizer = open_clip.get_tokenizer(name)
        self.device = device

    def image_features(self, images: np.ndarray):
        import torch
        from PIL import Image

        with torch.no_grad():
            x = torch.stack([self.preprocess(Image.fromarray(im)) for im in images])
            return torch.nn.functional.normalize(
                self.model.encode_image(x.to(self.device)), dim=-1)

    def text_features(self, texts: Sequence[str]):
        import torch

        with torch.no_grad():
            t = self.tokenizer(list(texts)).to(self.device)
            return torch.nn.functional.normalize(self.model.encode_text(t), dim=-1)


def _variant_groups(scene: Scene) -> dict[str, list[str]]:
    if isinstance(scene, Attributes):
        return {f"one.{a}": [v.caption() for v in one_attribute_variants(scene, a)]
                for a in ATTRIBUTE_NAMES}
    return {f"two.{g}": [v.caption() for c in clauses for v in one_attribute_variants(scene, c)]
            for g, clauses in _PAIR_GROUPS.items()}


def evaluate_clip(clip: ClipModel, n: int = 500, start: int = 0) -> ClipReport:
    wins: dict[str, list[int]] = {}
    for objects in (1, 2):
        samples = [dataset.sample(s, objects) for s in dataset.heldout_seeds(n, start)]
        img = clip.image_features(np.stack([np.asarray(s.image) for s in samples]))
        for i, s in enumerate(samples):
            for key, variants in _variant_groups(s.attributes).items():
                if not variants:
                    continue
                scores = clip.text_features([s.caption, *variants]) @ img[i]
                wins.setdefault(key, []).append(int(scores[0] > scores[1:].max()))
    return ClipReport(n=n, rank_first={k: sum(v) / len(v) for k, v in wins.items()})


def load_pipeline(weights: Path, device: str = "cpu"):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(weights / "shapes-sd")).to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def evaluate_generator(pipe, scenes: list[Scene], label: str, steps: int, guidance: float,
                       batch: int = 100) -> GeneratorReport:
    began = time.monotonic()
    images = generate(pipe, [s.caption() for s in scenes], list(range(len(scenes))), steps,
                      guidance, batch)
    from PIL import Image

    # Each image in its own world: the shipped v1 generator draws 32 px (v1 sizes)
    matches = [grade(s, Image.fromarray(im), world_of(im.shape[1])).clauses()
               for s, im in zip(scenes, images, strict=True)]
    keys = list(matches[0])
    n = len(scenes)
    return GeneratorReport(prompts=label, n=n, steps=steps, guidance=guidance,
                           found={k: sum(m[k] for m in matches) / n for k in keys},
                           all_correct=sum(all(m.values()) for m in matches) / n,
                           seconds=time.monotonic() - began)


def evaluate_vae(vae, n: int = 200, device: str = "cpu") -> dict[str, dict[str, float]]:
    """Checker rates on VAE round trips (encode, decode the mean) of held-out clean renders, one
    and two objects: the ceiling any generator decoding through this VAE can reach. A poor
    shape rate here blames the VAE, not the UNet."""
    import torch
    from PIL import Image

    out = {}
    for objects, label in ((1, "one"), (2, "two")):
        samples = [dataset.sample(s, objects) for s in dataset.heldout_seeds(n, start=90_000)]
        x = torch.from_numpy(np.stack([np.asarray(s.image) for s in samples])).to(device)
        x = x.permute(0, 3, 1, 2).float() / 127.5 - 1.0
        with torch.no_grad():
            recon = vae.decode(vae.encode(x.to(vae.dtype)).latent_dist.mean).sample.float()
        images = ((recon.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu()
        matches = [grade(s.attributes, Image.fromarray(im)).clauses()
                   for s, im in zip(samples, images.numpy(), strict=True)]
        out[label] = {k: sum(m[k] for m in matches) / n for k in matches[0]}
        out[label]["all_correct"] = sum(all(m.values()) for m in matches) / n
    return out


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """P(score of a random positive > a random negative), ties counting half."""
    p, q = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float(((p > q).sum() + 0.5 * (p == q).sum()) / (p.size * q.size))


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``p`` measured on ``n`` trials."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def selection_auc(pipe, clips: dict[str, ClipModel], n_prompts: int, k: int, steps: int,
                  guidance: float, workers: int = 1) -> list[SelectionReport]:
    """Mean within-prompt AUC of each CLIP, on the same generated images (half one-object,
    half two-object held-out prompts)."""
    scenes = (dataset.heldout_prompts(n_prompts // 2, start=50_000, objects=1)
              + dataset.heldout_prompts(n_prompts - n_prompts // 2, start=50_000, objects=2))
    captions = [s.caption() for s in scenes for _ in range(k)]
    images = generate(pipe, captions, [i % k for i in range(len(captions))], steps, guidance,
                      100)
    passed = [v.correct for v in verdicts(captions, images, workers)]
    reports = []
    for name, clip in clips.items():
        img = clip.image_features(images)
        txt = clip.text_features([s.caption() for s in scenes])
        aucs = []
        for j in range(len(scenes)):
            rows = range(j * k, (j + 1) * k)
            scores = (img[j * k:(j + 1) * k] @ txt[j]).tolist()
            pos = [sc for sc, r in zip(scores, rows, strict=True) if passed[r]]
            neg = [sc for sc, r in zip(scores, rows, strict=True) if not passed[r]]
            if pos and neg:
                aucs.append(auc(pos, neg))
        reports.append(SelectionReport(clip=name, prompts=len(scenes), images_per_prompt=k,
                                       mixed_prompts=len(aucs),
                                       mean_auc=float(np.mean(aucs)) if aucs else None,
                                       pass_rate=sum(passed) / len(passed)))
    return reports


def main(argv: list[str] | None = None) -> None:
    import torch

    from genloop.shapes import DEFAULT_GUIDANCE, DEFAULT_STEPS, weights_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=None, help="default: shipped weights")
    parser.add_argument("--old-weights", type=Path, default=None,
                        help="a second shapes-clip for the selection AUC comparison")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=500, help="prompts per generator set")
    parser.add_argument("--clip-n", type=int, default=500)
    parser.add_argument("--auc-prompts", type=int, default=100)
    parser.add_argument("--auc-images", type=int, default=8)
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--guidance", type=float, default=DEFAULT_GUIDANCE)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="checker processes")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    weights = args.weights or weights_dir()
    clip = ClipModel(weights, "shapes-clip-eval", args.device)
    pipe = load_pipeline(weights, args.device)
    reports: dict[str, object] = {"clip": evaluate_clip(clip, args.clip_n).model_dump(),
                                  "vae_roundtrip": evaluate_vae(pipe.vae, args.clip_n,
                                                                args.device)}
    sets = {"one": dataset.heldout_prompts(args.n, objects=1),
            "two": dataset.heldout_prompts(args.n, objects=2),
            "one-novel": dataset.novel_prompts(args.n // 2, objects=1),
            "two-novel": dataset.novel_prompts(args.n // 2, objects=2)}
    reports["generator"] = [evaluate_generator(pipe, s, label, args.steps, args.guidance)
                            .model_dump() for label, s in sets.items()]
    clips = {"new": clip}
    if args.old_weights is not None:
        clips["old"] = ClipModel(args.old_weights, "shapes-clip-old", args.device)
    reports["selection"] = [r.model_dump() for r in selection_auc(
        pipe, clips, args.auc_prompts, args.auc_images, args.steps, args.guidance,
        args.workers)]
    text = json.dumps(reports, indent=None if args.json else 2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
