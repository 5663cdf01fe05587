"""Campaign runner overhead: N variants on the embedded back end with the `tiny` model, side by
side with the same loops submitted and awaited by hand, then the campaign again (which must
generate nothing).

    python benchmarks/campaign.py [--variants 1000] [--threads 4] [--repeats 2] [--json]

Each variant is a 1-round, 1-candidate, 1-step loop. "by hand" is what a script would do:
``client.submit`` every loop, then ``wait`` for each. The campaign's extra time over it (planning,
run bookkeeping, formats, manifest, report) divided by the variants is its overhead per variant.
The re-run's time against the first is what a resumed campaign pays for work already done.
On a shared machine the two sides see different load: ``--repeats`` runs them in alternating
order and reports medians.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from statistics import median

from genloop.campaign import parse_spec, run
from genloop.sdk import Client


def spec(variants: int) -> dict:
    side = max(1, int(variants ** 0.5))
    rows = -(-variants // side)
    return {
        "name": "bench",
        "axes": {"product": [f"product {i}" for i in range(rows)],
                 "scene": [f"scene {j}" for j in range(side)]},
        "template": "{product} in {scene}",
        "formats": [{"name": "1:1", "width": 64, "height": 64}],
        "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 1, "steps": 1},
        "budget": {"images": variants},
    }


def by_hand(loops, home: Path, threads: int, resources) -> float:
    with Client.local(home=home, threads=threads, resources=resources) as client:
        start = time.perf_counter()
        for run_ in [client.submit(loop) for loop in loops]:
            run_.wait()
        return time.perf_counter() - start


def campaign_twice(campaign, home: Path, out: Path, threads: int,
                   resources) -> tuple[float, float, int, int]:
    """The first run's and the re-run's seconds, variants made, images the re-run made."""
    with Client.local(home=home, threads=threads, resources=resources) as client:
        start = time.perf_counter()
        first = run(campaign, client, out=out)
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        again = run(campaign, client, out=out)
        again_s = time.perf_counter() - start
    return (first_s, again_s, first.counts().get("succeeded", 0),
            again.spent_images - first.spent_images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1,
                        help="pairs, in alternating order (by hand first, then the campaign first)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from genloop.workers.models.resources import Resources

    campaign = parse_spec(spec(args.variants))
    loops = [campaign.loop_for(values) for values in campaign.variants()][: args.variants]
    resources = Resources(device="cpu")  # one set of models for both, loaded before timing
    hand, first, again, made, rerun_images = [], [], [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        with Client.local(home=Path(tmp) / "warm", threads=args.threads,
                          resources=resources) as client:
            client.submit(loops[0].model_copy(update={"prompt": "warm-up"})).wait()
        for r in range(args.repeats):
            order = ("hand", "campaign") if r % 2 == 0 else ("campaign", "hand")
            for which in order:
                if which == "hand":
                    hand.append(by_hand(loops, Path(tmp) / f"hand{r}", args.threads, resources))
                else:
                    f, a, made, rerun_images = campaign_twice(
                        campaign, Path(tmp) / f"home{r}", Path(tmp) / f"out{r}", args.threads,
                        resources)
                    first.append(f)
                    again.append(a)
    hand_s, first_s, again_s = median(hand), median(first), median(again)
    figures = {
        "variants": made, "repeats": args.repeats, "by_hand_s": round(hand_s, 2),
        "campaign_s": round(first_s, 2), "campaign_vs_hand": round(first_s / hand_s, 3),
        "overhead_per_variant_ms": round(1000 * (first_s - hand_s) / max(made, 1), 1),
        "rerun_s": round(again_s, 3), "rerun_ratio": round(again_s / first_s, 4),
        "rerun_per_variant_ms": round(1000 * again_s / max(made, 1), 2),
        "rerun_images": rerun_images,
        "runs_s": {"by_hand": [round(x, 2) for x in hand], "campaign": [round(x, 2) for x in first],
                   "rerun": [round(x, 3) for x in again]},
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{made} variants, median of {args.repeats}: by hand {hand_s:.1f} s, campaign "
          f"{first_s:.1f} s (x{figures['campaign_vs_hand']}, "
          f"{figures['overhead_per_variant_ms']} ms overhead a variant); re-run {again_s:.2f} s "
          f"= {figures['rerun_ratio']:.2%} of the first, {figures['rerun_images']} images")


if __name__ == "__main__":
    main()
