"""Generate eight candidates, score them with CLIP, keep the best two. Embedded: no server.

    python examples/quickstart.py [--home .genloop] [--n 8]
"""

from __future__ import annotations

import argparse

from genloop.sdk import Client, Graph


def main(home: str, n: int, steps: int | None) -> list[float]:
    prompt = "a red sneaker on a mountain trail"
    with Client.local(home=home) as client:
        g = Graph()
        gen = g.generate(prompt, n=n, seed=0, model="tiny", steps=steps)
        scores = g.score(gen, text=prompt, evaluator="clip")
        top = g.select(scores, top_k=2, min_success=max(1, n - 2))
        run = client.submit(g)
        for event in run.events():
            if event.type.startswith("node."):
                print(f"{event.type:16} {event.node_id}")
        result = run.wait(timeout=600)
        best = result.items(top)
        for c in best:
            print(f"seed {c.seed}: score {c.score:.2f}, {len(client.read_artifact(c.artifact))} "
                  "bytes of PNG")
        return [c.score for c in best]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".genloop")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    main(args.home, args.n, args.steps)
