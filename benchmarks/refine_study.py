"""Where can a refine loop beat best-of-N with the shipped shapes model? Per prompt, by the
pixel checker (which nothing here optimises).

    python benchmarks/refine_study.py [--prompts 100] [--seeds 24] [--edit-prompts 25] [--json]

1. **Pool.** ``--seeds`` images of each held-out prompt (``loop_quality``'s benchmark set,
   seeds 0..n-1, the shipped pipeline called directly at its defaults), graded per clause.
   Reported: how many prompts the model draws right on every seed, on none, on some; which
   clauses miss.
2. **Selection.** Best-of-N from the pool (disjoint windows of N seeds) picked by
   ``shapes-clip``, by ``shapes-critic`` and by an oracle (any right image): the ceiling that no
   judge can pass without better images. And the within-prompt AUC of each judge.
3. **Edits.** For the first ``--edit-prompts`` prompts with a miss, the critic's best 2 of
   seeds 0..3 are edited (img2img, 2 seeds each) at each ``--strengths``: how often an edit is
   right, beside how often a fresh seed of the same prompt is. (Inpainting is not offered: the
   v1 UNet has 8 input channels, which diffusers' inpainting pipeline refuses.)
4. **Emphasis.** The same prompts with the word of the clause the pool missed most repeated at
   the end ("..., gray background, triangle"), seeds 0..7, paired per prompt with the plain
   prompt's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from loop_quality import benchmark_prompts  # noqa: E402

from genloop import shapes  # noqa: E402


def _auc(pos: list[float], neg: list[float]) -> float:
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def _generate(pipe, prompts: list[str], seeds: list[int], **edit):
    import torch

    return pipe(prompt=prompts, num_inference_steps=shapes.DEFAULT_STEPS,
                guidance_scale=shapes.DEFAULT_GUIDANCE,
                generator=[torch.Generator("cpu").manual_seed(s) for s in seeds], **edit).images


def _grade(prompt: str, image):
    return shapes.grade(shapes.parse_caption(prompt), image, shapes.world_of(image.width))


def _right(prompt: str, image) -> bool:
    return _grade(prompt, image).all_correct


def _clause_word(prompt: str, clause: str) -> str:
    """The caption's word for ``clause`` ("shape", "second.colour", ...)."""
    owner, _, name = clause.rpartition(".")
    scene = shapes.parse_caption(prompt)
    return getattr(getattr(scene, owner) if owner else scene, name)


def main(argv: list[str] | None = None) -> None:
    import torch
    from diffusers import AutoPipelineForImage2Image, DiffusionPipeline

    from genloop.evaluators.registry import get_evaluator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--edit-prompts", type=int, default=25)
    parser.add_argument("--strengths", default="0.4,0.6,0.8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = DiffusionPipeline.from_pretrained(str(shapes.pipeline_path()), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    judges = {name: get_evaluator(name, device="cpu")
              for name in (shapes.CLIP_MODEL_NAME, "shapes-critic")}
    prompts = [p for _, p in benchmark_prompts(args.prompts)]
    seeds = list(range(args.seeds))
    pool = []  # per prompt: images, verdicts, scores per judge, missed clauses
    for prompt in prompts:
        images = _generate(pipe, [prompt] * len(seeds), seeds)
        matches = [_grade(prompt, im) for im in images]
        pool.append({"prompt": prompt, "images": images,
                     "right": [m.all_correct for m in matches],
                     "missed": [[k for k, ok in m.clauses().items() if not ok] for m in matches],
                     **{j: e.score(images, prompt).values for j, e in judges.items()}})
    rates = [statistics.mean(p["right"]) for p in pool]
    missed: dict[str, int] = {}
    for p in pool:
        for clauses in p["missed"]:
            for c in clauses:
                missed[c] = missed.get(c, 0) + 1
    report: dict = {
        "prompts": len(pool), "seeds": args.seeds, "right_rate": statistics.mean(rates),
        "prompts_never_right": sum(r == 0 for r in rates),
        "prompts_always_right": sum(r == 1 for r in rates), "missed_clauses": missed,
        "selection": {}, "auc": {},
    }
    for n in sorted({n for n in (4, 8, args.seeds) if n <= args.seeds}):
        windows = range(0, args.seeds - n + 1, n)
        row = {}
        for j in judges:
            row[j] = statistics.mean(
                p["right"][max(range(w, w + n), key=p[j].__getitem__)]
                for p in pool for w in windows)
        row["oracle"] = statistics.mean(any(p["right"][w:w + n]) for p in pool for w in windows)
        report["selection"][f"best-of-{n}"] = row
    for j in judges:
        aucs = [_auc([s for s, r in zip(p[j], p["right"], strict=True) if r],
                     [s for s, r in zip(p[j], p["right"], strict=True) if not r])
                for p in pool if 0 < sum(p["right"]) < len(p["right"])]
        report["auc"][j] = statistics.mean(aucs) if aucs else float("nan")

    some_miss = [p for p, r in zip(pool, rates, strict=True) if r < 1][:args.edit_prompts]
    img2img = AutoPipelineForImage2Image.from_pipe(pipe)
    img2img.set_progress_bar_config(disable=True)
    edits: dict[str, dict[str, list[bool]]] = {}
    for p in some_miss:
        critic = p["shapes-critic"]
        parents = sorted(range(min(4, args.seeds)), key=lambda i: -critic[i])[:2]
        for strength in args.strengths.split(","):
            for i in parents:
                out = _generate(img2img, [p["prompt"]] * 2, [1000 + 10 * i, 1001 + 10 * i],
                                image=[p["images"][i]] * 2, strength=float(strength))
                key = "from_right" if p["right"][i] else "from_wrong"
                row = edits.setdefault(strength, {"from_right": [], "from_wrong": [],
                                                  "fresh_right_rate": []})
                row[key] += [_right(p["prompt"], im) for im in out]
                row["fresh_right_rate"] += [statistics.mean(p["right"])] * 2
    report["edits"] = {s: {k: (statistics.mean(v) if v else None, len(v)) for k, v in row.items()}
                       for s, row in edits.items()}

    plain, emphasised = [], []
    for p in some_miss:
        counts: dict[str, int] = {}
        for clauses in p["missed"]:
            for c in clauses:
                if c != "count":  # an object too many or too few has no word to repeat
                    counts[c] = counts.get(c, 0) + 1
        if not counts:
            continue
        word = _clause_word(p["prompt"], max(counts, key=counts.__getitem__))
        n = min(8, args.seeds)
        out = _generate(pipe, [f"{p['prompt']}, {word}"] * n, list(range(n)))
        emphasised.append(statistics.mean(_right(p["prompt"], im) for im in out))
        plain.append(statistics.mean(p["right"][:n]))
    diff = [e - q for e, q in zip(emphasised, plain, strict=True)]
    if diff:  # paired over prompts: resample prompts, keep each one's two rates together
        rng = random.Random(0)
        means = sorted(statistics.mean(rng.choice(diff) for _ in diff) for _ in range(10000))
        report["emphasis"] = {"prompts": len(diff), "plain": statistics.mean(plain),
                              "emphasised": statistics.mean(emphasised),
                              "diff_ci95": (means[250], means[9749])}
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
