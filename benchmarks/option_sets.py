"""A gateway's memory after 1,000 runs, each scoring with evaluator options of its own.

    python benchmarks/option_sets.py [--runs 1000] [--concurrency 8] [--unbounded] [--json]

Evaluator options are a tenant's choice and part of the evaluator cache's key, so every distinct
set builds an evaluator (issue #40: five 90,000-colour palettes grew a gateway by 80 MB for
good). One process serves as ``genloop serve --local`` does: a real uvicorn gateway on a loopback
port over an embedded back end (worker threads in the same process), and a tenant submits
through ``Client.http`` graphs of one tiny image scored by ``composite`` over ``clip`` and
``brand-palette`` with a palette of its own (32 colours, the most a tenant may send). The image
is the same every run (stored once, reused), so the evaluator work is what grows.

Resident memory (``/proc/self/statm``) is read after a warm-up of 20 runs (models loaded,
connections and SQLite pages warm) and after the measured runs, each after a garbage
collection. ``--unbounded`` lifts the evaluator cache's bound, to see what it holds back.
Goal: within 50 MB of the start after 1,000 option sets.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from genloop.evaluators.options import MAX_PALETTE
from genloop.sdk import Client, Graph

GOAL_MB = 50.0


def rss_mb() -> float:
    """This process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak, in KiB on Linux-likes and bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def scored_once(index: int) -> Graph:
    """One tiny image scored with a palette no other run uses."""
    palette = [f"#{(index * MAX_PALETTE + c) % 0xFFFFFF:06x}" for c in range(MAX_PALETTE)]
    g = Graph()
    gen = g.generate("a red circle", n=1, model="tiny", steps=2, seed=0, id="gen")
    g.score(gen, text="a red circle", evaluator="composite", id="score", options={
        "weights": {"clip": 1, "brand-palette": 0.5},
        "options": {"brand-palette": {"palette": palette}}})
    return g


def serve(backend):
    """A gateway over ``backend`` on a loopback port, in a thread: ``(url, key, server,
    thread)``. The tenant's limits let every run in (this measures memory, not limits)."""
    import uvicorn

    from genloop.gateway import (
        GatewaySettings,
        SqliteGatewayStore,
        TenantLimits,
        create_app,
    )

    store = SqliteGatewayStore(tempfile.mkdtemp(prefix="genloop-bench-gw-") + "/gateway.db")
    key = store.create_key("bench")
    limits = TenantLimits(max_concurrent_runs=1_000)
    server = uvicorn.Server(uvicorn.Config(create_app(backend, store, GatewaySettings(
        limits=limits)), host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", key, server, thread


def run_all(client: Client, first: int, count: int, concurrency: int) -> None:
    def one(index: int) -> None:
        result = client.submit(scored_once(index)).wait(timeout=300)
        assert result.status == "succeeded", (index, result.status, result.error)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(first, first + count)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="distinct option sets")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads")
    parser.add_argument("--threads", type=int, default=4, help="embedded worker threads")
    parser.add_argument("--unbounded", action="store_true",
                        help="lift the evaluator cache's bound (as before issue #40)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from genloop.workers.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(tempfile.mkdtemp(prefix="genloop-bench-options-"),
                              threads=args.threads)
    evaluators = backend.runtime.resources.evaluators
    if args.unbounded:
        evaluators.max_instances = 10**9
    url, key, server, thread = serve(backend)
    client = Client.http(url, api_key=key)
    try:
        run_all(client, 0, 20, args.concurrency)  # warm-up: its option sets are not counted
        gc.collect()
        start_mb, start = rss_mb(), time.perf_counter()
        run_all(client, 20, args.runs, args.concurrency)
        gc.collect()
        end_mb, seconds = rss_mb(), time.perf_counter() - start
        held = len(evaluators._instances)
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)
        backend.close()

    report = {
        "runs": args.runs, "bound": None if args.unbounded else evaluators.max_instances,
        "start_mb": round(start_mb, 1), "end_mb": round(end_mb, 1),
        "growth_mb": round(end_mb - start_mb, 1), "goal_mb": GOAL_MB,
        "evaluators_held": held, "seconds": round(seconds, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        bound = "unbounded" if args.unbounded else f"LRU of {evaluators.max_instances}"
        print(f"{args.runs} runs with distinct evaluator options through the gateway "
              f"({bound}, {seconds:.0f} s)")
        print(f"  resident memory {start_mb:.1f} MB -> {end_mb:.1f} MB: "
              f"{end_mb - start_mb:+.1f} MB (goal: within {GOAL_MB:.0f} MB); "
              f"{held} evaluators held")
    return 0 if end_mb - start_mb <= GOAL_MB or args.unbounded else 1


if __name__ == "__main__":
    sys.exit(main())
