"""Approximate reuse across prompts (``reuse="auto"``) against the same stream without it.

Three modes, on the trained ``shapes`` model through genloop's engine (batching and step cache as
shipped):

  stream     (default) a campaign-shaped stream: one template ("a large {colour} {shape}
             {position}, {background} background") over its axes in a shuffled order, each
             variant drawn with seeds 0..seeds-1, submitted ``--batch`` variants at a time, as a
             campaign's concurrent loops reach the engine. Each block runs twice in turn, on two
             engines: without reuse and with it (its latent cache filling as the stream goes).
             Reported: images/s of each (median of per-block ratios, and totals), denoising
             steps skipped, the checker's all-correct rate of each with the paired difference
             and its 95% bootstrap interval over variants, per clause, the judge's mean score
             (shapes-clip, each image against its prompt), and PSNR of each reused image to
             the no-reuse image of the same seed.
  refine     a loop's second round after 'prompt-variants': ``--prompts`` held-out prompts,
             round 1's seeds again with a modifier appended to the prompt; round 1 is drawn
             first (untimed) on both engines. Reported as for the stream.
  calibrate  the table behind ``latent_cache.REUSE_TABLE``: pairs of prompts that differ in one
             clause; the second starts from the first's latents after 10/25/50% of the
             schedule; all-correct of each against no reuse, with the pair's embedding
             similarity, per changed clause.

    python benchmarks/latent_reuse.py --prompts 200            # the stream, human-readable
    python benchmarks/latent_reuse.py --mode refine --prompts 50 --seeds 4
    python benchmarks/latent_reuse.py --mode calibrate --json

Quality is graded by the pixel checker, which neither the engine nor the cache sees. Figures
are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time

import numpy as np
import torch

from genloop.shapes import checker
from genloop.shapes.scene import BACKGROUNDS, COLOURS, POSITIONS, SHAPES, Attributes
from genloop.workers.engine import latent_cache
from genloop.workers.engine.engine import EngineOptions
from genloop.workers.engine.generate import ImageSettings, call_pipeline
from genloop.workers.engine.latent_cache import prompt_vectors
from genloop.workers.engine.registry import ModelRegistry
from genloop.workers.engine.step_cache import prepare_step_cache


def variants(count: int, rng: random.Random) -> list[Attributes]:
    grid = [Attributes(colour=c, shape=s, size="large", position=p, background=b)
            for c, s, p, b in itertools.product(COLOURS, SHAPES, POSITIONS, BACKGROUNDS)]
    rng.shuffle(grid)
    return grid[:count]


def psnr(a, b) -> float:
    x, y = np.asarray(a, float), np.asarray(b, float)
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def correct(scene: Attributes, image) -> tuple[bool, dict[str, bool]]:
    match = checker.compare(scene, checker.check(image))
    return match.all_correct, match.clauses()


def interval(diffs: list[float], rng: random.Random, samples: int = 5000) -> tuple[float, float]:
    """95% bootstrap interval of the mean of ``diffs`` (one value per variant)."""
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(samples))
    return means[int(0.025 * samples)], means[int(0.975 * samples)]


Image = tuple[Attributes, str, int, int]  # (scene, prompt, seed, variant)


def engines() -> tuple[dict, ImageSettings]:
    """Two engines on the shapes model, loaded and warmed: without reuse and with it."""
    pair = {name: ModelRegistry("cpu", engine_options=EngineOptions(window=0.01)).engine
            for name in ("off", "auto")}
    d = pair["off"].models.defaults("shapes")
    settings = ImageSettings(steps=d.steps, guidance=d.guidance, width=d.width, height=d.height)
    for engine in pair.values():
        engine.generate("shapes", ["warm-up"], [99], settings)
    return pair, settings


def measure(mode: str, blocks: list[list[Image]], args, rng: random.Random,
            warm: list[list[Image]] = ()) -> dict:
    """Each block through both engines in turn (``warm`` blocks first, untimed: what the caches
    hold before the measured ones), graded by the checker and the judge."""
    from genloop.evaluators import get_evaluator

    pair, settings = engines()
    judge = get_evaluator("shapes-clip")
    for block in warm:  # as the loop's own first round: the reusing side keeps its latents
        for name, engine in pair.items():
            engine.wait(engine.submit("shapes", [b[1] for b in block], [b[2] for b in block],
                                      settings, reuse=name == "auto"))
    seconds = {"off": 0.0, "auto": 0.0}
    ratios, rows = [], []
    for block in blocks:
        images, took, starts = {}, {}, []
        for name, engine in pair.items():
            began = time.perf_counter()
            job = engine.submit("shapes", [b[1] for b in block], [b[2] for b in block],
                                settings, reuse=name == "auto")
            images[name] = engine.wait(job)
            took[name] = time.perf_counter() - began
            seconds[name] += took[name]
            starts = job.starts
        ratios.append(took["off"] / took["auto"])
        scores = {name: [judge.score([im], b[1]).values[0]
                         for im, b in zip(images[name], block, strict=True)] for name in pair}
        for i, (scene, _, _, variant) in enumerate(block):
            rows.append({"variant": variant,
                         "off": correct(scene, images["off"][i]),
                         "auto": correct(scene, images["auto"][i]),
                         "judge": {name: scores[name][i] for name in pair},
                         "start": starts[i].step if starts[i] is not None else 0,
                         "psnr": psnr(images["off"][i], images["auto"][i])})
    for engine in pair.values():
        engine.close()
    n = len(rows)
    per_variant: dict[int, list[float]] = {}
    for r in rows:
        per_variant.setdefault(r["variant"], []).append(float(r["auto"][0]) - float(r["off"][0]))
    diffs = [statistics.fmean(v) for v in per_variant.values()]
    reused = [r for r in rows if r["start"]]
    sides = ("off", "auto")
    return {
        "mode": mode, "table": latent_cache.REUSE_TABLE, "variants": len(per_variant),
        "images": n, "steps": settings.steps, "threads": torch.get_num_threads(),
        "images_per_s": {k: n / v for k, v in seconds.items()},
        "speedup_total": seconds["off"] / seconds["auto"],
        "speedup_median_block": statistics.median(ratios),
        "reused_images": len(reused),
        "steps_skipped_fraction": sum(r["start"] for r in rows) / (n * settings.steps),
        "all_correct": {side: statistics.fmean(r[side][0] for r in rows) for side in sides},
        "all_correct_diff": statistics.fmean(diffs),
        "all_correct_diff_95": interval(diffs, rng),
        "clauses": {c: {side: statistics.fmean(r[side][1][c] for r in rows) for side in sides}
                    for c in rows[0]["off"][1]},
        "judge": {side: statistics.fmean(r["judge"][side] for r in rows) for side in sides},
        "psnr_reused_median": statistics.median(r["psnr"] for r in reused) if reused else None,
        "psnr_reused_min": min(r["psnr"] for r in reused) if reused else None,
    }


def stream(args, rng: random.Random) -> dict:
    """A campaign: one template over four axes, ``--batch`` variants a block."""
    scenes = variants(args.prompts, rng)
    images = [(scene, scene.caption(), seed, v)
              for v, scene in enumerate(scenes) for seed in range(args.seeds)]
    size = args.batch * args.seeds
    return measure("stream", [images[i:i + size] for i in range(0, len(images), size)],
                   args, rng)


def refine(args, rng: random.Random) -> dict:
    """A loop's second round after 'prompt-variants': round 1's seeds again, each prompt with a
    modifier appended; round 1 (untimed) is what both caches hold."""
    from genloop.shapes import heldout_prompts
    from genloop.workers.ops.refine import PROMPT_MODIFIERS

    scenes = [s for s in heldout_prompts(args.prompts) if isinstance(s, Attributes)]
    seeds = range(args.seeds)
    first = [[(s, s.caption(), seed, v) for seed in seeds] for v, s in enumerate(scenes)]
    second = [[(s, f"{s.caption()}, {PROMPT_MODIFIERS[(v + j) % len(PROMPT_MODIFIERS)]}", seed, v)
               for j, seed in enumerate(seeds)] for v, s in enumerate(scenes)]
    return measure("refine", second, args, rng, warm=first)


def scene(rng: random.Random) -> Attributes:
    return Attributes(colour=rng.choice(list(COLOURS)), shape=rng.choice(SHAPES),
                      size=rng.choice(["small", "large"]), position=rng.choice(POSITIONS),
                      background=rng.choice(list(BACKGROUNDS)))


def calibrate(args, rng: random.Random) -> dict:
    reg = ModelRegistry("cpu")
    d = reg.defaults("shapes")
    settings = ImageSettings(steps=d.steps, guidance=d.guidance, width=d.width, height=d.height)
    fractions = (0.1, 0.25, 0.5)
    options: dict[str, list[str] | None] = {
        "colour": list(COLOURS), "shape": list(SHAPES), "position": list(POSITIONS),
        "background": list(BACKGROUNDS), "size": ["small", "large"],
        "any": None}  # a second scene drawn afresh: several clauses may change
    options = {k: v for k, v in options.items() if k in args.clauses.split(",")}
    seeds = list(range(args.seeds))
    out: dict = {"mode": "calibrate", "steps": settings.steps, "pairs": args.pairs, "clauses": {}}
    records: list[tuple[float, dict[float, list[bool]]]] = []  # (similarity, hits) per pair
    with reg.acquire("shapes") as pipe, torch.no_grad():
        for clause, values in options.items():
            hits = {f: [] for f in (0.0, *fractions)}
            similarity = []
            for _ in range(args.pairs):
                a, b = scene(rng), scene(rng)
                if values is not None:
                    b = a.model_copy(update={clause: rng.choice(
                        [v for v in values if v != getattr(a, clause)])})
                vectors = prompt_vectors(pipe, [a.caption(), b.caption()])
                similarity.append(float(vectors[0] @ vectors[1]))
                kept: dict[int, torch.Tensor] = {}
                marks = {int(f * settings.steps) for f in fractions}

                def keep(done, latents, kept=kept, marks=marks):
                    if done in marks:
                        kept[done] = latents.clone()

                prepare_step_cache(pipe, "default", settings.steps)
                call_pipeline(pipe, [a.caption()] * len(seeds), seeds, settings,
                              on_latents=keep)
                pair: dict[float, list[bool]] = {}
                for f in hits:
                    k = int(f * settings.steps)
                    prepare_step_cache(pipe, "default", settings.steps - k)
                    images = call_pipeline(pipe, [b.caption()] * len(seeds), seeds, settings,
                                           start=k, latents=kept.get(k))
                    pair[f] = [correct(b, im)[0] for im in images]
                    hits[f] += pair[f]
                records.append((similarity[-1], pair))
            out["clauses"][clause] = {
                "similarity_median": statistics.median(similarity),
                "similarity_min": min(similarity),
                "all_correct": {str(f): statistics.fmean(v) for f, v in hits.items()}}
    reg.engine.close()
    # What a table row (least similarity, fraction) would do: all-correct of the pairs it
    # admits, with and without the skip, over every changed clause.
    out["rows"] = [
        {"least": least, "fraction": f, "pairs": len(admitted),
         "all_correct_reuse": statistics.fmean(h for _, p in admitted for h in p[f]),
         "all_correct_off": statistics.fmean(h for _, p in admitted for h in p[0.0])}
        for f in fractions for least in (0.5, 0.6, 0.7, 0.8, 0.9, 0.94, 0.96, 0.97, 0.98)
        if (admitted := [r for r in records if r[0] >= least])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["stream", "refine", "calibrate"], default="stream")
    parser.add_argument("--prompts", type=int, default=200, help="stream: variants")
    parser.add_argument("--seeds", type=int, default=2, help="images per variant (or pair)")
    parser.add_argument("--batch", type=int, default=4, help="stream: variants per block")
    parser.add_argument("--pairs", type=int, default=16, help="calibrate: pairs per clause")
    parser.add_argument("--clauses", default="colour,shape,position,background,size,any",
                        help="calibrate: the clauses a pair differs in ('any': a fresh scene)")
    parser.add_argument("--table", default=None,
                        help="stream: a REUSE_TABLE to try instead of the shipped one, as "
                        "'least:fraction,...' (e.g. '0.96:0.25,0.5:0.1')")
    parser.add_argument("--rng", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.rng)
    if args.table:
        latent_cache.REUSE_TABLE = tuple(
            (float(least), float(fraction))
            for least, fraction in (row.split(":") for row in args.table.split(",")))
    result = {"stream": stream, "refine": refine, "calibrate": calibrate}[args.mode](args, rng)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    if result["mode"] == "calibrate":
        print(f"one clause changed, {result['pairs']} pairs x {args.seeds} seeds, "
              f"{result['steps']} steps: all-correct by fraction of the schedule skipped")
        for clause, r in result["clauses"].items():
            shares = "  ".join(f"{f}: {v:.3f}" for f, v in r["all_correct"].items())
            print(f"  {clause:<10} similarity median {r['similarity_median']:.3f} "
                  f"min {r['similarity_min']:.3f}   {shares}")
        print("table rows: pairs at or above the similarity, all-correct with the skip / without")
        for row in result["rows"]:
            print(f"  >= {row['least']:.2f} skip {row['fraction']:.0%}: {row['pairs']:>3} pairs"
                  f"  {row['all_correct_reuse']:.3f} / {row['all_correct_off']:.3f}")
        return
    ips = result["images_per_s"]
    lo, hi = result["all_correct_diff_95"]
    print(f"{result['mode']}, table {result['table']}: {result['variants']} variants, "
          f"{result['images']} images, {result['steps']} steps, {result['threads']} threads")
    print(f"  images/s   off {ips['off']:.2f}   auto {ips['auto']:.2f}   "
          f"x{result['speedup_total']:.3f} total, x{result['speedup_median_block']:.3f} "
          "median block")
    print(f"  reused     {result['reused_images']} images, "
          f"{result['steps_skipped_fraction']:.1%} of denoising steps skipped")
    print(f"  all-correct off {result['all_correct']['off']:.3f}  auto "
          f"{result['all_correct']['auto']:.3f}  diff {result['all_correct_diff']:+.3f} "
          f"[{lo:+.3f}, {hi:+.3f}] (95%)")
    for clause, v in result["clauses"].items():
        print(f"    {clause:<10} off {v['off']:.3f}  auto {v['auto']:.3f}")
    print(f"  judge (shapes-clip) off {result['judge']['off']:.2f}  auto "
          f"{result['judge']['auto']:.2f}")
    if result["psnr_reused_median"] is not None:
        print(f"  PSNR of reused images to no reuse: median {result['psnr_reused_median']:.1f} "
              f"dB, min {result['psnr_reused_min']:.1f} dB")


if __name__ == "__main__":
    main()
