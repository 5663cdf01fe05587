"""Latency an agent waiting on one run feels: how late ``wait()`` returns, and hand-offs on an
idle pool, each side by side with what genloop did before (in the same run).

    python benchmarks/latency.py [--runs 30] [--chain 100] [--redis redis://127.0.0.1:6379/8]
                                 [--json]

- ``wait lag``: a one-node run of 0.2 s, then ``Run.wait()``; the lag is from the run's recorded
  end (``finished_at``) to ``wait()`` returning. ``told``: the back end's wait, woken by the
  store's run-end watch; ``polled``: the SDK's polling wait (pause 0.05 s growing to 1 s), what
  ``wait()`` did before. Embedded (``Client.local``'s back end), and on Redis the pool's store
  with one in-process Dramatiq worker.
- ``first node``: submit to the first node's start on an idle Redis pool, and ``chain``: a chain
  of no-op nodes, milliseconds per hop (run created to run ended, over the hops). ``waking``: the
  pool's broker (``WakingRedisBroker``); ``dramatiq``: Dramatiq's RedisBroker, whose idle
  consumers sleep between fetches. Both at Dramatiq's CLI's worker timeout (1 s), as
  ``genloop worker`` runs; both sides warmed.

Medians and p95; the machine may be shared, so compare within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid

import redis
from dramatiq.brokers.redis import RedisBroker
from orchestration import Graph, build, genloop_latency, pct
from pydantic import BaseModel

from genloop.evaluators import default_registry as default_evaluators
from genloop.sdk.polling import WaitForEnd
from genloop.workers.artifacts import LocalArtifactStore
from genloop.workers.backends.store_backend import StoreBackend
from genloop.workers.ops import default_refiners
from genloop.workers.pool.waking_broker import WakingRedisBroker


class Sleep(BaseModel):
    i: int
    seconds: float = 0.2


def _register_sleep(wiring) -> None:
    from genloop.workers.ops.registry import op

    def body(params: Sleep, inputs, ctx):
        time.sleep(params.seconds)
        return Sleep(i=params.i)

    op("sleep", params=Sleep, output=Sleep, registry=wiring.scheduler.registry)(body)


def wait_lags(backend: StoreBackend, runs: int, polled: bool) -> list[float]:
    lags = []
    for i in range(runs):
        g = Graph()
        g.add("sleep", params={"i": i + (runs if polled else 0)})
        run = backend.scheduler.submit(g)
        if polled:  # what wait() did before: read the status, sleep a growing pause
            waiting = WaitForEnd(run.id, 60, 0.05)
            while (pause := waiting.pause(backend.get(run.id))) is not None:
                time.sleep(pause)
        else:
            backend.wait(run.id, 60)
        lags.append(time.time() - backend.get(run.id).finished_at)
    return lags


def chain_ms_per_hop(wiring, hops: int, offset: int) -> float:
    g, prev = Graph(), None
    for i in range(hops):
        prev = g.add("noop", id=f"c{i}", inputs=[prev] if prev else [],
                     params={"i": offset + i})
    run = wiring.scheduler.submit(g)
    store = wiring.scheduler.store
    while not (ended := store.get_run(run.id)).status.terminal:
        time.sleep(0.05)
    assert ended.status == "succeeded"
    return (ended.finished_at - ended.created_at) / hops * 1000


def _summary(values: list[float], scale: float = 1000.0) -> dict:
    return {"median_ms": statistics.median(values) * scale, "p95_ms": pct(values, 0.95) * scale}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report: dict = {}
    with tempfile.TemporaryDirectory() as home:
        for where, url in (("embedded", None), ("redis", args.redis)):
            prefix = f"bench-{uuid.uuid4().hex[:8]}"
            broker, wiring, worker, *_ = build(f"{home}/{where}", 2, url, prefix,
                                               broker_class=WakingRedisBroker,
                                               worker_timeout=1000)
            try:
                _register_sleep(wiring)
                backend = StoreBackend(
                    wiring.scheduler, LocalArtifactStore(f"{home}/{where}/artifacts"),
                    models=dict, evaluators=default_evaluators, refiners=default_refiners)
                wait_lags(backend, 2, polled=False)  # warm-up
                report[f"wait_lag_{where}"] = {
                    side: _summary(wait_lags(backend, args.runs, polled=side == "polled"))
                    for side in ("told", "polled")}
            finally:
                worker.stop()
        client = redis.Redis.from_url(args.redis)
        for side, broker_class in (("waking", WakingRedisBroker), ("dramatiq", RedisBroker)):
            prefix = f"bench-{uuid.uuid4().hex[:8]}"
            broker, wiring, worker, *_ = build(f"{home}/{side}", 4, args.redis, prefix,
                                               broker_class=broker_class, worker_timeout=1000)
            try:
                chain_ms_per_hop(wiring, 5, offset=-10)  # warm-up
                time.sleep(1.5)  # idle: Dramatiq's sleeps have grown to the worker timeout
                first = genloop_latency(wiring, args.runs, offset=-1000)
                report[f"first_node_{side}"] = _summary(first)
                report[f"chain_{side}_ms_per_hop"] = chain_ms_per_hop(wiring, args.chain, 0)
            finally:
                worker.stop()
                for key in client.scan_iter(f"{prefix}*"):
                    client.delete(key)
    if args.json:
        print(json.dumps(report))
        return
    for where in ("embedded", "redis"):
        told, polled = report[f"wait_lag_{where}"]["told"], report[f"wait_lag_{where}"]["polled"]
        print(f"wait lag, {where:8s}: told {told['median_ms']:.1f} ms (p95 "
              f"{told['p95_ms']:.1f}); polled {polled['median_ms']:.1f} ms (p95 "
              f"{polled['p95_ms']:.1f})")
    for side in ("waking", "dramatiq"):
        first = report[f"first_node_{side}"]
        print(f"redis, {side:8s} broker: first node {first['median_ms']:.1f} ms (p95 "
              f"{first['p95_ms']:.1f}), chain {report[f'chain_{side}_ms_per_hop']:.2f} ms/hop")


if __name__ == "__main__":
    main()
