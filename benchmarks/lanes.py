"""Priority lanes: an agent's loop submitted just after a campaign-sized backlog, with lanes
(the backlog in the batch lane) beside today's single FIFO lane, in one run.

    python benchmarks/lanes.py [--backlog 160] [--candidates 8] [--rounds 2] [--repeats 3]
                               [--json]

``Client.local()`` with the shipped ``shapes`` model and ``shapes-clip`` judge, resident for
the whole run. Each repetition measures, with fresh seeds (nothing comes from the result
store):

- ``alone``: the loop (``--rounds`` x ``--candidates``) on an idle engine, submit to ``wait()``
  returning;
- ``lanes``: a generate of ``--backlog`` images (one instance each, ``priority="batch"``), then
  at once the loop (interactive, the default): the loop's latency, and the backlog's wall time;
- ``fifo``: the same with the backlog in the interactive lane, as every run was before lanes;
- ``backlog alone``: the backlog on an idle engine, for its throughput with and without the loop.

Medians; the machine may be shared, so compare within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from genloop import shapes
from genloop.sdk import Client, Graph, Loop
from genloop.workers.models.resources import Resources


def _loop(seed: int, args: argparse.Namespace) -> Loop:
    return Loop(prompt="a large red circle in the centre, black background",
                model=shapes.PIPELINE_NAME, evaluator=shapes.CLIP_MODEL_NAME,
                candidates=args.candidates, rounds=args.rounds, seed=seed)


def _backlog(seed: int, priority: str | None, args: argparse.Namespace) -> Graph:
    g = Graph(priority=priority)
    g.generate("a small blue square at the top left, white background",
               model=shapes.PIPELINE_NAME, n=args.backlog, seed=seed, shard_size=1)
    return g


def _timed(client: Client, spec) -> float:
    began = time.perf_counter()
    client.submit(spec).wait(timeout=3600)
    return time.perf_counter() - began


def _behind(client: Client, backlog: Graph, loop: Loop) -> tuple[float, float]:
    """(loop latency, backlog wall) with the loop submitted right after the backlog."""
    began = time.perf_counter()
    queued = client.submit(backlog)
    agent = client.submit(loop)
    agent.wait(timeout=3600)
    loop_s = time.perf_counter() - began
    queued.wait(timeout=3600)
    return loop_s, time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=160, help="images queued first")
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    resources = Resources(device="cpu")
    rows: dict[str, list[float]] = {k: [] for k in (
        "alone", "lanes", "fifo", "backlog alone", "backlog with lanes", "backlog with fifo")}
    with tempfile.TemporaryDirectory() as home, \
            Client.local(home=Path(home), resources=resources) as client:
        _timed(client, _loop(10_000, args))  # warm: model, judge, engine thread
        for r in range(args.repeats):
            seed = 1000 * (r + 1)
            rows["alone"].append(_timed(client, _loop(seed, args)))
            rows["backlog alone"].append(_timed(client, _backlog(seed, "batch", args)))
            loop_s, wall = _behind(client, _backlog(seed + 300, "batch", args),
                                   _loop(seed + 300, args))
            rows["lanes"].append(loop_s)
            rows["backlog with lanes"].append(wall)
            loop_s, wall = _behind(client, _backlog(seed + 600, None, args),
                                   _loop(seed + 600, args))
            rows["fifo"].append(loop_s)
            rows["backlog with fifo"].append(wall)

    med = {k: statistics.median(v) for k, v in rows.items()}
    report = {
        "medians_s": med, "runs_s": rows,
        "loop_behind_backlog_vs_alone": {"lanes": med["lanes"] / med["alone"],
                                         "fifo": med["fifo"] / med["alone"]},
        "backlog_throughput_vs_alone": {
            "lanes": med["backlog alone"] / med["backlog with lanes"],
            "fifo": med["backlog alone"] / med["backlog with fifo"]},
        "settings": vars(args),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.rounds}x{args.candidates} loop behind {args.backlog} queued images, "
          f"medians of {args.repeats}:")
    print(f"  loop alone                 {med['alone']:7.2f} s")
    print(f"  loop behind, batch lane    {med['lanes']:7.2f} s  "
          f"({med['lanes'] / med['alone']:.2f}x alone)")
    print(f"  loop behind, one FIFO lane {med['fifo']:7.2f} s  "
          f"({med['fifo'] / med['alone']:.2f}x alone)")
    print(f"  backlog alone              {med['backlog alone']:7.2f} s")
    for lane in ("lanes", "fifo"):
        wall = med[f"backlog with {lane}"]
        print(f"  backlog with the loop, {lane:5s}{wall:7.2f} s  "
              f"(throughput {med['backlog alone'] / wall:.2f}x alone, the loop's images "
              f"included in its wall)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
