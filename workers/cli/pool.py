"""``genloop worker`` and ``genloop demo``: the commands that execute work in this machine.

Both need the ``workers`` extra; their imports stay inside the bodies so the CLI can say so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .client import add_target, open_client


def cmd_worker(args: argparse.Namespace) -> int:
    """Exec Dramatiq's own CLI on genloop's worker module, configured through the environment."""
    import os

    from ..models.resources import Resources
    from ..pool import worker_process as w
    from ..stores.retention import ENV_RETENTION

    if args.models:
        # A bad config fails here, once, naming every problem, not in every worker process.
        w.refuse_bad_config(Resources(allowed=w.worker_config(args.models, args.memory_budget)))
    env = dict(os.environ)
    env.update({
        w.ENV_REDIS: args.redis, w.ENV_ARTIFACTS: args.artifacts, w.ENV_QUEUES: args.queues,
        w.ENV_IMPORTS: ",".join(args.imports), w.ENV_PRELOAD: ",".join(args.preload),
        w.ENV_LEASE_TTL: str(args.lease_ttl), w.ENV_HEARTBEAT_MS: str(args.heartbeat_timeout_ms),
        w.ENV_MODELS: str(Path(args.models).resolve()) if args.models else "",
        w.ENV_METRICS_PORT: str(args.metrics_port or ""), w.ENV_METRICS_HOST: args.metrics_host,
        w.ENV_PROCESSES: str(args.processes), w.ENV_GRACE: str(args.grace),
        w.ENV_MEMORY_BUDGET: "" if args.memory_budget is None else str(args.memory_budget),
        **({ENV_RETENTION: str(args.retention)} if args.retention is not None else {}),
    })
    # Fair queuing lets one message per pool thread into a queue (redis_fair_queue); a process
    # that fetched more than its threads can run (Dramatiq's default is twice) would sit on
    # messages another process's idle threads could run.
    env.setdefault("dramatiq_queue_prefetch", str(args.threads))
    # No --queues for Dramatiq: a process declares the actors of its queues and of its models'
    # routed queues (worker_process), and consumes what it declared.
    argv = [sys.executable, "-m", "dramatiq", "genloop.workers.pool.worker_main",
            "--processes", str(args.processes), "--threads", str(args.threads),
            # Dramatiq waits this long for its threads' messages; the drain bounds the rest.
            "--worker-shutdown-timeout", str(int(args.grace * 1000))]
    os.execve(sys.executable, argv, env)
    return 0  # not reached


def setup_worker(p: argparse.ArgumentParser) -> None:
    import dramatiq  # noqa: F401  (fail at parse time, with the extra named, not after exec)

    from ..pool.broker import DEFAULT_QUEUES
    from ..pool.worker_process import DEFAULT_GRACE
    from ..stores.retention import duration

    p.set_defaults(fn=cmd_worker)
    p.add_argument("--redis", required=True, help="redis://host:6379/0")
    p.add_argument("--artifacts", required=True, help="file:///shared/dir or s3://bucket/prefix")
    p.add_argument("--queues", default=",".join(DEFAULT_QUEUES),
                   help="comma-separated queues to consume")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--import", dest="imports", action="append", default=[],
                   help="module defining custom ops (repeatable)")
    p.add_argument("--preload", action="append", default=[], help="model to load at start")
    p.add_argument("--models", metavar="FILE",
                   help="models config (TOML/JSON): the models beyond the built-ins that load "
                   "and the operator's own judges (docs/own-models.md)")
    p.add_argument("--memory-budget", type=float, metavar="GIB",
                   help="GiB the resident models may hold in each process (default: the "
                   "config's memory_budget_gib, else 70%% of the GPU's memory or half the RAM)")
    p.add_argument("--lease-ttl", type=float, default=15.0,
                   help="claim lease, seconds (renewed every third); a dead worker's work "
                   "is re-sent about a lease plus a sweep tick after it died")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE,
                   help="on SIGTERM, seconds the work already running may take to finish; "
                   "waiting work is handed back to the pool at once, unfinished work at the "
                   "end of the grace")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics at /metrics: process i of --processes N on "
                   "the first free port of PORT .. PORT+N-1")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address the metrics bind to")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=60_000,
                   help="requeue a dead worker's messages after this long")
    p.add_argument("--retention", type=duration, metavar="TIME",
                   help="keep a finished run this long (7d, 12h, 30m, seconds; default "
                   "GENLOOP_RETENTION or 7d), then delete it and the results only it kept")


def cmd_pool(args: argparse.Namespace) -> int:
    import redis

    from ..pool.pool_status import BacklogCollector, pool_status
    from ..stores.redis import RedisStateStore

    client = redis.Redis.from_url(args.redis)
    store = RedisStateStore(client=client, prefix=args.prefix)
    if args.action == "status":
        status = pool_status(client, args.prefix, store)
        print(status.model_dump_json(indent=2) if args.json else _status_text(status))
        return 0
    import threading

    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(BacklogCollector(client, args.prefix, store))
    start_http_server(args.port, addr=args.host, registry=registry)
    print(f"backlog metrics on http://{args.host}:{args.port}/metrics", flush=True)
    threading.Event().wait()
    return 0  # not reached


def _status_text(status) -> str:
    lines = [f"workers ({len(status.workers)}):"]
    for w in status.workers:
        running = f"{w.running[0]} x{w.running[1]}" if w.running else "idle"
        queued = ", ".join(f"{m} x{n}" for m, n in w.queued_images.items()) or "nothing"
        loads = ", ".join(f"{m} x{n}" for m, n in w.loads.items()) or "none"
        lines.append(f"  {w.host}:{w.pid}  queues {','.join(w.queues)}  threads {w.threads}  "
                     f"resident {','.join(w.resident) or '-'}  loads {loads}  running {running}  "
                     f"queued {queued}  deferred {w.deferred}"
                     + ("  DRAINING" if w.draining else ""))
    lines.append("queues:")
    for q in status.queues:
        lines.append(f"  {q.queue}  queued {q.queued}  started {q.started}  "
                     f"workers {q.workers}")
    lines.append("models:")
    for m in status.models:
        seconds = "not measured" if m.seconds is None else f"{m.seconds:.1f} s of work"
        lines.append(f"  {m.model}  instances {m.instances}  images {m.images}  {seconds}  "
                     f"resident on {m.workers}")
    if status.storage is not None:
        s = status.storage
        lines.append(f"storage: runs {s.runs} (expiring {s.expiring}, pinned {s.pinned})  "
                     f"results expiring {s.results_expiring}  redis {s.bytes / 2**20:.1f} MiB")
    return "\n".join(lines)


def setup_pool(p: argparse.ArgumentParser) -> None:
    import redis  # noqa: F401  (fail at parse time, with the extra named)

    p.set_defaults(fn=cmd_pool)
    p.add_argument("action", choices=["status", "exporter"],
                   help="status: print workers and backlog; exporter: serve the backlog as "
                   "Prometheus metrics (for an autoscaler such as KEDA)")
    p.add_argument("--redis", required=True, help="the pool's Redis, redis://host:6379/0")
    p.add_argument("--prefix", default="genloop", help="the pool's key prefix")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.add_argument("--port", type=int, default=9464, help="exporter: port of /metrics")
    p.add_argument("--host", default="127.0.0.1", help="exporter: address to bind")


def cmd_demo(args: argparse.Namespace) -> int:
    from genloop.sdk import Loop

    from .demo import run_demo

    loop = Loop(
        prompt=args.prompt, candidates=args.candidates, rounds=args.rounds, model=args.model,
        evaluator=args.evaluator, steps=args.steps, refiner=args.refiner, seed=args.seed,
    )
    with open_client(args) as client:
        summary = run_demo(client, loop, Path(args.out), progress=not args.quiet)
    print(summary)
    return 0


def setup_demo(p: argparse.ArgumentParser) -> None:
    import tqdm  # noqa: F401  (the demo's progress bar: a workers-extra package)

    from . import demo

    add_target(p)
    p.set_defaults(fn=cmd_demo)
    p.add_argument("--out", default="out/demo")
    # The shapes models are trained here and ship in the package: their images can be judged
    # by eye and by genloop.shapes.check, unlike the random-weight `tiny` ones.
    p.add_argument("--prompt", default=demo.DEMO_PROMPT)
    p.add_argument("--rounds", type=int, default=demo.DEMO_ROUNDS)
    p.add_argument("--candidates", type=int, default=demo.DEMO_CANDIDATES)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--model", default="shapes")
    p.add_argument("--evaluator", default="shapes-clip")
    p.add_argument("--refiner", default="seed-search")
    p.add_argument("--seed", type=int, default=demo.DEMO_SEED, help="round 1's first seed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
