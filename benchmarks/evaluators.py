"""Scoring throughput: genloop's batched, cached evaluator against a naive per-pair loop.

Scores C candidates against P prompts (256 x 8 by default) with one open_clip model, three ways:

  naive       for every (image, prompt) pair: preprocess and encode the image alone, tokenize and
              encode the prompt alone, take the cosine (how a per-call CLIPScore is often used)
  score       genloop, one ``judge.score(images, prompt)`` per prompt: images in batches, each
              prompt encoded once (the runtime's ``score`` op, one node per prompt)
  score_texts genloop, one ``judge.score_texts(images, prompts)``: every image encoded once

Throughput is in scored (image, prompt) pairs per second ("images/s"); the ratio is against the
naive loop. Each variant runs ``--repeats`` times in this one process, in rounds that interleave
the variants, with the prompt cache cleared before each run; the median time is reported.
Weights are random (seeded): speed does not depend on them, so larger open_clip architectures
(``--model ViT-B-32``) need no download.

    python benchmarks/evaluators.py            # human-readable
    python benchmarks/evaluators.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np
import torch
from PIL import Image

from genloop.evaluators import OpenClipEvaluator


def make_images(count: int, size: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in range(count)
    ]


def naive(
    judge: OpenClipEvaluator, images: list[Image.Image], prompts: list[str]
) -> list[list[float]]:
    """One image and one prompt through the same model at a time, nothing reused."""
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            row = []
            for image in images:
                pixels = judge.preprocess(image).unsqueeze(0).to(judge.device, judge.dtype)
                image_row = judge.model.encode_image(pixels).float()
                text_row = judge.model.encode_text(
                    judge.tokenizer([prompt]).to(judge.device)
                ).float()
                cos = torch.nn.functional.cosine_similarity(image_row, text_row).item()
                row.append(100 * max(cos, 0.0))
            out.append(row)
    return out


def per_prompt(judge: OpenClipEvaluator, images, prompts) -> list[list[float]]:
    return [judge.score(images, prompt).values for prompt in prompts]


def all_prompts(judge: OpenClipEvaluator, images, prompts) -> list[list[float]]:
    return [scores.values for scores in judge.score_texts(images, prompts)]


def run_once(fn, judge, images, prompts) -> tuple[float, list[list[float]]]:
    judge.text_cache.clear()
    if judge.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn(judge, images, prompts)
    if judge.device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--model", default="tiny-clip-v1")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=128, help="candidate side in pixels")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    judge = OpenClipEvaluator(args.model, device=args.device, batch_size=args.batch_size)
    images = make_images(args.candidates, args.image_size)
    prompts = [f"a product photo, variant {i}, studio lighting" for i in range(args.prompts)]
    pairs = args.candidates * args.prompts
    all_prompts(judge, images[:4], prompts[:2])  # warm-up: allocator, kernels, tokenizer

    report: dict[str, object] = {
        "model": judge.identity,
        "device": judge.device
        if judge.device == "cpu"
        else f"{judge.device} ({torch.cuda.get_device_name(judge.device)})",
        "dtype": str(judge.dtype).removeprefix("torch."),
        "cpu": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "candidates": args.candidates,
        "prompts": args.prompts,
        "repeats": args.repeats,
        "batch_size": args.batch_size,
    }
    variants = {"naive": naive, "score": per_prompt, "score_texts": all_prompts}
    times: dict[str, list[float]] = {label: [] for label in variants}
    values: dict[str, list[list[float]]] = {}
    # Rounds interleave the variants, so that a change in machine load during the run (shared
    # CI runners) lands on all of them rather than on whichever ran last.
    for _ in range(args.repeats):
        for label, fn in variants.items():
            seconds, values[label] = run_once(fn, judge, images, prompts)
            times[label].append(seconds)
    naive_s = statistics.median(times["naive"])
    report["naive"] = {
        "seconds": naive_s,
        "images_per_s": pairs / naive_s,
        "runs_s": times["naive"],
    }
    for label in ["score", "score_texts"]:
        seconds = statistics.median(times[label])
        error = max(
            abs(a - b)
            for row, ref in zip(values[label], values["naive"], strict=True)
            for a, b in zip(row, ref, strict=True)
        )
        report[label] = {
            "seconds": seconds,
            "images_per_s": pairs / seconds,
            "ratio_vs_naive": naive_s / seconds,
            "max_abs_diff_vs_naive": error,
            "runs_s": times[label],
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['model']} on {report['device']} ({report['dtype']}), "
            f"{args.candidates} candidates x {args.prompts} prompts, median of {args.repeats}"
        )
        for label in ["naive", "score", "score_texts"]:
            row = report[label]
            ratio = f"  {row['ratio_vs_naive']:.1f}x" if "ratio_vs_naive" in row else ""
            print(
                f"  {label:<12} {row['seconds']:8.3f} s  "
                f"{row['images_per_s']:10.1f} images/s{ratio}"
            )
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
