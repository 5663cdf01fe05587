"""genloop against Celery on the same Redis: a chain, independent tasks, and a fan-out/fan-in.

    pip install 'celery[redis]'   # not a genloop dependency: only this benchmark needs it
    python benchmarks/vs_celery.py [--chain 100] [--tasks 1000] [--fanout 1000] [--repeats 3]
                                   [--threads 4] [--redis redis://127.0.0.1:6379/9] [--json]

Each side has one worker of ``--threads`` threads on one Redis database, and each task does
nothing, so what is timed is the orchestration. Celery: a worker process started with
``--pool threads`` (its workers block on BRPOP), its result back end on the same Redis, the
work as Celery's own primitives (``chain``, ``group``, ``chord``) and ``.get()`` for the
result. genloop: a Dramatiq worker on the pool's broker (``WakingRedisBroker``) in this process,
the work as one graph, ``wait()`` for the end. Both timed from the call that submits to the
call that returns, both warmed with one small run first. Medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import redis
from celery import Celery, chain, chord, group

REDIS = os.environ.get("VS_CELERY_REDIS", "redis://127.0.0.1:6379/9")
app = Celery("vs_celery", broker=REDIS, backend=REDIS)
app.conf.update(worker_prefetch_multiplier=4, task_acks_late=False, result_expires=600,
                broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)


@app.task(name="noop")
def noop(previous: int | None = None, i: int = 0) -> int:
    return i


@app.task(name="count")
def count(items: list[int]) -> int:
    return len(items)


# -- Celery ---------------------------------------------------------------------------------------
def start_celery_worker(threads: int) -> subprocess.Popen:
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--quiet", "-A", "vs_celery", "worker", "--pool",
         "threads", "-c", str(threads), "--loglevel", "WARNING", "--without-gossip",
         "--without-mingle", "--without-heartbeat"],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        env={**os.environ, "VS_CELERY_REDIS": REDIS},
    )
    deadline = time.time() + 60
    while time.time() < deadline and worker.poll() is None:
        try:
            if noop.apply_async(kwargs={"i": 1}).get(timeout=2) == 1:
                return worker
        except Exception:  # noqa: BLE001 - not up yet
            pass
    worker.kill()
    raise RuntimeError("the Celery worker exited or did not answer within 60 s")


def celery_chain(hops: int) -> float:
    t0 = time.perf_counter()
    result = chain(noop.s(None, 0), *(noop.s(i=i) for i in range(1, hops))).apply_async()
    assert result.get(timeout=120) == hops - 1
    return time.perf_counter() - t0


def celery_tasks(n: int) -> float:
    t0 = time.perf_counter()
    result = group(noop.s(None, i) for i in range(n)).apply_async()
    assert len(result.get(timeout=300)) == n
    return time.perf_counter() - t0


def celery_fanout(n: int) -> float:
    t0 = time.perf_counter()
    result = chord(noop.s(None, i) for i in range(n))(count.s())
    assert result.get(timeout=300) == n
    return time.perf_counter() - t0


# -- genloop --------------------------------------------------------------------------------------
def genloop_side(home: str, threads: int, prefix: str):
    from orchestration import build

    from genloop.evaluators import default_registry as default_evaluators
    from genloop.workers.artifacts import LocalArtifactStore
    from genloop.workers.backends.store_backend import StoreBackend
    from genloop.workers.ops import default_refiners
    from genloop.workers.pool.waking_broker import WakingRedisBroker

    _broker, wiring, worker, *_ = build(home, threads, REDIS, prefix,
                                        broker_class=WakingRedisBroker, worker_timeout=1000)
    backend = StoreBackend(wiring.scheduler, LocalArtifactStore(f"{home}/artifacts"),
                           models=dict, evaluators=default_evaluators, refiners=default_refiners)
    return backend, worker


def _timed(backend, graph) -> float:
    t0 = time.perf_counter()
    run = backend.scheduler.submit(graph)
    assert backend.wait(run.id, 300).status == "succeeded"
    return time.perf_counter() - t0


def _fresh_graph():
    """A graph in a namespace of its own, so no result of an earlier run is reused."""
    from genloop.sdk import Graph

    return Graph(namespace=uuid.uuid4().hex)


def genloop_chain(backend, hops: int) -> float:
    g, prev = _fresh_graph(), None
    for i in range(hops):
        prev = g.add("noop", id=f"c{i}", inputs=[prev] if prev else [], params={"i": i})
    return _timed(backend, g)


def genloop_tasks(backend, n: int) -> float:
    g = _fresh_graph()
    for i in range(n):
        g.add("noop", id=f"n{i}", params={"i": i})
    return _timed(backend, g)


def genloop_fanout(backend, n: int) -> float:
    g = _fresh_graph()
    spread = g.add("spread", id="spread", params={"count": n})
    each = g.add("each", id="each", inputs=[spread], map=True)
    g.add("gather", id="gather", inputs=[each])
    return _timed(backend, g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    client = redis.Redis.from_url(REDIS)
    client.flushdb()
    times: dict[str, list[float]] = {}
    celery_worker = start_celery_worker(args.threads)
    try:
        celery_chain(5), celery_tasks(20), celery_fanout(20)  # warm-up
        for _ in range(args.repeats):
            times.setdefault("chain_celery", []).append(celery_chain(args.chain))
            times.setdefault("tasks_celery", []).append(celery_tasks(args.tasks))
            times.setdefault("fanout_celery", []).append(celery_fanout(args.fanout))
    finally:
        celery_worker.terminate()
        celery_worker.wait(30)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as home:
        backend, worker = genloop_side(home, args.threads, prefix)
        try:
            genloop_chain(backend, 5), genloop_tasks(backend, 20)  # warm-up
            genloop_fanout(backend, 20)
            for _ in range(args.repeats):
                times.setdefault("chain_genloop", []).append(genloop_chain(backend, args.chain))
                times.setdefault("tasks_genloop", []).append(genloop_tasks(backend, args.tasks))
                times.setdefault("fanout_genloop", []).append(
                    genloop_fanout(backend, args.fanout))
        finally:
            worker.stop()
    client.flushdb()
    sizes = {"chain": args.chain, "tasks": args.tasks, "fanout": args.fanout}
    report = {}
    for work, size in sizes.items():
        celery_s = statistics.median(times[f"{work}_celery"])
        genloop_s = statistics.median(times[f"{work}_genloop"])
        report[work] = {"size": size, "celery_s": celery_s, "genloop_s": genloop_s,
                        "celery_ms_each": celery_s / size * 1000,
                        "genloop_ms_each": genloop_s / size * 1000,
                        "genloop_speedup": celery_s / genloop_s}
    if args.json:
        print(json.dumps(report))
        return
    for work, row in report.items():
        print(f"{work:7s} x{row['size']:<5d} celery {row['celery_s']:.3f} s "
              f"({row['celery_ms_each']:.2f} ms each)  genloop {row['genloop_s']:.3f} s "
              f"({row['genloop_ms_each']:.2f} ms each)  genloop/celery speed "
              f"{row['genloop_speedup']:.2f}x")


if __name__ == "__main__":
    main()
