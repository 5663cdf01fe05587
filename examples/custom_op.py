"""A custom op in a graph: a flaky watermark check on every candidate, retried, with a quorum.

    python examples/custom_op.py [--home .genloop]

``check`` fails now and then (like a remote moderation API); it is retried with backoff, and a
candidate that still fails is left out: the select after it needs only 3 of the 4.
"""

from __future__ import annotations

import argparse
import random

from pydantic import BaseModel

from genloop.sdk import Client, Graph, ScoredCandidate
from genloop.workers import OpContext, Transient, op


class CheckParams(BaseModel):
    failure_rate: float = 0.3


@op("check", params=CheckParams, output=ScoredCandidate, max_retries=3, min_backoff=0.05)
def check(params: CheckParams, inputs: list, ctx: OpContext) -> ScoredCandidate:
    (candidate,) = inputs
    # Seeded by instance and attempt, so the example fails the same way every time.
    if random.Random(f"{ctx.instance_id}:{ctx.attempt}").random() < params.failure_rate:
        raise Transient("moderation service timed out")
    return ScoredCandidate.model_validate(candidate, from_attributes=True)


def main(home: str) -> int:
    prompt = "a steel water bottle in a city street"
    with Client.local(home=home) as client:
        g = Graph()
        gen = g.generate(prompt, n=4, steps=2)
        scored = g.score(gen, text=prompt)
        checked = g.add("check", inputs=[scored], map=True)
        top = g.select(checked, top_k=1, min_success=3)
        result = client.submit(g).wait(timeout=600)
        best = result.items(top)
        print(f"{result.status}; best score {best[0].score:.2f}" if best else result.status)
        for f in result.failures:
            print(f"  failed: {f.instance_id} after {f.attempts} attempts: {f.message}")
        return len(result.outputs[checked].items)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".genloop")
    main(parser.parse_args().home)
