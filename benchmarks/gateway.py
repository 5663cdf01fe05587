"""The HTTP gateway's cost: submit + wait of no-op runs through HTTP vs directly, same back end.

    python benchmarks/gateway.py [--runs 200] [--repeats 3] [--concurrency 1] [--json]
    python benchmarks/gateway.py --redis redis://127.0.0.1:6379/0 --artifacts file:///tmp/a
        (Redis: start `genloop worker --redis URL --artifacts ... --import benchmarks.gateway`
         first; the direct side is then Client.connect)

One process, one back end (embedded by default: StubBroker, worker threads, SQLite). The gateway
is a real uvicorn server on a loopback port, in a thread, over that same back end object; the
HTTP side goes through ``Client.http`` (httpx, auth, tenant ownership, JSON both ways). Each run
is one no-op node with its own params, so nothing is served from the result cache. Both sides
wait by polling the run's status from 2 ms (growing 1.5x), so the poll interval is the same.
Sides alternate within each repeat; the figures are medians over repeats.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel

from genloop.sdk import Backend, Client, Graph, Run
from genloop.workers import op


class Salted(BaseModel):
    salt: str


class Nothing(BaseModel):
    pass


@op("bench-noop", params=Salted, output=Nothing)
def noop(params: Salted, inputs: list, ctx) -> Nothing:
    return Nothing()


def serve(backend: Backend, key_tenant: str = "bench"):
    from genloop.gateway import GatewaySettings, TenantLimits

    limits = TenantLimits(max_concurrent_runs=10_000)
    return serve_app(backend, GatewaySettings(limits=limits), key_tenant)


def serve_app(backend: Backend, settings, key_tenant: str = "bench"):
    """A gateway over ``backend`` with ``settings`` on a loopback port, in a thread:
    ``(url, key, server, thread)``."""
    import uvicorn

    from genloop.gateway import SqliteGatewayStore, create_app

    store = SqliteGatewayStore(tempfile.mkdtemp(prefix="genloop-bench-gw-") + "/gateway.db")
    key = store.create_key(key_tenant)
    app = create_app(backend, store, settings)
    # proto=TCP, or asyncio leaves Nagle on for accepted sockets (+40 ms per answer).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", key, server, thread


def one_run(client: Client) -> float:
    g = Graph()
    g.add("bench-noop", params={"salt": uuid.uuid4().hex})
    start = time.perf_counter()
    info = client.backend.submit(g, None)
    result = Run(client.backend, info, poll_interval=0.002).wait(timeout=60)
    assert result.status == "succeeded", result
    return time.perf_counter() - start


def measure(client: Client, runs: int, concurrency: int) -> dict[str, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = sorted(pool.map(lambda _: one_run(client), range(runs)))
    wall = time.perf_counter() - start
    return {
        "runs_per_s": runs / wall,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def median_of(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(s[k] for s in samples), 2) for k in samples[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per side per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1, help="client threads per side")
    parser.add_argument("--threads", type=int, default=4, help="embedded worker threads")
    parser.add_argument("--redis", help="use the Redis back end (workers started separately)")
    parser.add_argument("--artifacts", help="artifact store URI of the Redis back end")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    direct = (Client.connect(args.redis, artifacts=args.artifacts) if args.redis
              else Client.local(tempfile.mkdtemp(prefix="genloop-bench-"), threads=args.threads))
    url, key, server, thread = serve(direct.backend)
    http = Client.http(url, api_key=key)
    try:
        for client in (direct, http):  # warm up: imports, connections, SQLite pages
            measure(client, 10, 1)
        samples: dict[str, list[dict[str, float]]] = {"direct": [], "http": []}
        for _ in range(args.repeats):
            samples["direct"].append(measure(direct, args.runs, args.concurrency))
            samples["http"].append(measure(http, args.runs, args.concurrency))
    finally:
        http.close()
        server.should_exit = True
        thread.join(timeout=10)
        direct.close()

    d, h = median_of(samples["direct"]), median_of(samples["http"])
    report = {
        "backend": "redis" if args.redis else "embedded",
        "runs": args.runs, "repeats": args.repeats, "concurrency": args.concurrency,
        "direct": d, "http": h,
        "overhead_ms_per_run_p50": round(h["p50_ms"] - d["p50_ms"], 2),
        "overhead_ms_per_run_throughput": round(
            1000 * (1 / h["runs_per_s"] - 1 / d["runs_per_s"]) * args.concurrency, 2),
        "http_vs_direct_throughput": round(h["runs_per_s"] / d["runs_per_s"], 3),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['backend']} back end, {args.runs} no-op runs x {args.repeats} repeats, "
              f"concurrency {args.concurrency} (medians)")
        for side, s in (("direct", d), ("http", h)):
            print(f"  {side:6}  {s['runs_per_s']:8.1f} runs/s   p50 {s['p50_ms']:7.2f} ms   "
                  f"p99 {s['p99_ms']:7.2f} ms")
        print(f"  gateway overhead: {report['overhead_ms_per_run_p50']} ms per run at p50, "
              f"throughput x{report['http_vs_direct_throughput']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
