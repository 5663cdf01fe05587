"""Campaign runner overhead: N variants on the embedded back end with the `tiny` model, side by
side with the same loops submitted and awaited by hand, then the campaign again (which must
generate nothing).

    python benchmarks/campaign.py [--variants 1000] [--threads 4] [--json]

Each variant is a 1-round, 1-candidate, 1-step loop. "by hand" is what a script would do:
``client.submit`` every loop, then ``wait`` for each. The campaign's extra time over it (planning,
run bookkeeping, formats, manifest, report) divided by the variants is its overhead per variant.
The re-run's time against the first is what a resumed campaign pays for work already done.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from genloop.workers.resources import Resources

    campaign = parse_spec(spec(args.variants))
    loops = [campaign.loop_for(values) for values in campaign.variants()][: args.variants]
    resources = Resources(device="cpu")  # one set of models for both, loaded before timing
    with tempfile.TemporaryDirectory() as tmp:
        with Client.local(home=Path(tmp) / "warm", threads=args.threads,
                          resources=resources) as client:
            client.submit(loops[0].model_copy(update={"prompt": "warm-up"})).wait()
        with Client.local(home=Path(tmp) / "hand", threads=args.threads,
                          resources=resources) as client:
            start = time.perf_counter()
            for run_ in [client.submit(loop) for loop in loops]:
                run_.wait()
            hand_s = time.perf_counter() - start
        with Client.local(home=Path(tmp) / "home", threads=args.threads,
                          resources=resources) as client:
            start = time.perf_counter()
            first = run(campaign, client, out=Path(tmp) / "out")
            first_s = time.perf_counter() - start
            start = time.perf_counter()
            again = run(campaign, client, out=Path(tmp) / "out")
            again_s = time.perf_counter() - start
    made = first.counts().get("succeeded", 0)
    figures = {
        "variants": made, "by_hand_s": round(hand_s, 2), "campaign_s": round(first_s, 2),
        "overhead_per_variant_ms": round(1000 * (first_s - hand_s) / max(made, 1), 1),
        "rerun_s": round(again_s, 3), "rerun_ratio": round(again_s / first_s, 4),
        "rerun_images": again.spent_images - first.spent_images,
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{made} variants: by hand {hand_s:.1f} s, campaign {first_s:.1f} s "
          f"({figures['overhead_per_variant_ms']} ms overhead a variant); re-run "
          f"{again_s:.2f} s = {figures['rerun_ratio']:.2%} of the first, "
          f"{figures['rerun_images']} images")


if __name__ == "__main__":
    main()
