"""Webhook delivery latency: from a run's recorded end to its signed POST reaching a receiver.

    python benchmarks/webhooks.py [--runs 100] [--concurrency 8] [--json]

One process: the gateway (a real uvicorn server on loopback over the embedded back end), a
receiver (http.server on loopback, allowed by the gateway's ``webhook_allow``), and clients
submitting no-op runs with a webhook, ``concurrency`` at a time. Latency is the receiver's clock
at arrival minus the run's ``finished_at``, both this machine's clock. A webhook is not a
delivery of anything a plain alternative would do in-process, so this measures the goal
(p95 <= 1 s on loopback) rather than a ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway import serve_app  # noqa: E402
from genloop.sdk import Client, Graph  # noqa: E402


def receiver() -> tuple[str, dict[str, float], ThreadingHTTPServer]:
    arrived: dict[str, float] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            at = time.time()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            arrived.setdefault(body["run_id"], at)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", arrived, server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from genloop.gateway import GatewaySettings, TenantLimits

    hook, arrived, rx = receiver()
    local = Client.local(tempfile.mkdtemp(prefix="genloop-bench-"), threads=4)
    settings = GatewaySettings(limits=TenantLimits(max_concurrent_runs=10_000,
                                                  webhook_attempts_per_minute=1_000_000),
                               webhook_allow=["127.0.0.1/32"])
    url, key, server, thread = serve_app(local.backend, settings)
    httpx.post(f"{url}/v1/webhooks/secret", headers={"Authorization": f"Bearer {key}"})
    http = Client.http(url, api_key=key)

    def one(_: int) -> tuple[str, float]:
        g = Graph(webhook={"url": hook})
        g.add("bench-noop", params={"salt": uuid.uuid4().hex})
        result = http.submit(g).wait(timeout=60)
        return result.run_id, result.finished_at

    try:
        one(0)  # warm up
        with ThreadPoolExecutor(args.concurrency) as pool:
            ended = dict(pool.map(one, range(args.runs)))
        deadline = time.monotonic() + 30
        while not set(ended) <= set(arrived) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        http.close()
        server.should_exit = True
        thread.join(timeout=10)
        local.close()
        rx.shutdown()
    lags = sorted(arrived[r] - ended[r] for r in ended if r in arrived)
    report = {
        "runs": args.runs, "concurrency": args.concurrency, "delivered": len(lags),
        "p50_s": round(statistics.median(lags), 3),
        "p95_s": round(lags[min(len(lags) - 1, int(len(lags) * 0.95))], 3),
        "max_s": round(lags[-1], 3),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['delivered']}/{args.runs} delivered; after the run's end: p50 "
              f"{report['p50_s']} s, p95 {report['p95_s']} s, max {report['max_s']} s")
    return 0 if report["delivered"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
