"""A batch campaign: one loop per product x place x audience, all in flight at once; collect
the best image of each variant. One failed variant never stops the others.

    python examples/campaign.py [--home .genloop] [--candidates 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import itertools
import json

from genloop.sdk import Client, Loop

PRODUCTS = ["a red sneaker", "a steel water bottle"]
PLACES = ["on a mountain trail", "in a city street"]
AUDIENCES = ["for runners", "for commuters"]


def main(home: str, candidates: int, rounds: int, steps: int | None) -> dict[str, float]:
    variants = [" ".join(v) for v in itertools.product(PRODUCTS, PLACES, AUDIENCES)]
    with Client.local(home=home, threads=4) as client:
        runs = {
            prompt: client.submit(
                Loop(prompt=prompt, candidates=candidates, rounds=rounds, steps=steps),
                idempotency_key=f"campaign:{prompt}:{candidates}:{rounds}:{steps}",
            )
            for prompt in variants
        }
        best = {}
        for prompt, run in runs.items():
            result = run.wait(timeout=1800)
            if result.best is None:
                print(f"{prompt}: {result.status} ({result.error})")
                continue
            best[prompt] = result.best.score
            print(f"{prompt}: best {result.best.score:.2f} (round {result.best.round}, "
                  f"seed {result.best.seed}), {len(result.failures)} failed item(s)")
    print(json.dumps(best, indent=2))
    return best


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".genloop")
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    main(args.home, args.candidates, args.rounds, args.steps)
