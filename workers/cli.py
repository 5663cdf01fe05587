"""The ``genloop`` command line. Thin: it parses, calls the library, renders."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from genloop.sdk import Client, GenloopError, Loop, RunSpec

DEFAULT_HOME = ".genloop"


def _client(args: argparse.Namespace, workers: bool = True) -> Client:
    if args.redis:
        return Client.connect(args.redis)
    # Without worker threads the embedded runtime only reads the store: `status` and `events`
    # must never start executing a run another process is driving.
    return Client.local(home=args.home, threads=args.threads if workers else 0)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        spec = TypeAdapter(RunSpec).validate_json(Path(args.file).read_bytes())
    except (OSError, ValidationError) as exc:
        print(f"genloop run: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    with _client(args) as client:
        run = client.submit(spec, idempotency_key=args.idempotency_key)
        print(f"run {run.id} submitted", file=sys.stderr)
        result = run.wait(timeout=args.timeout)
        print(result.model_dump_json(indent=2))
        return 0 if result.status == "succeeded" else 1


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args, workers=False) as client:
        print(client.get(args.run).info.model_dump_json(indent=2))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    with _client(args, workers=False) as client:
        for event in client.get(args.run).events(after=args.after, follow=args.follow):
            print(event.model_dump_json(exclude_none=True))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with _client(args) as client:
        result = client.resume(args.run).wait(timeout=args.timeout)
        print(result.model_dump_json(indent=2))
        return 0 if result.status == "succeeded" else 1


def cmd_worker(args: argparse.Namespace) -> int:
    """Exec Dramatiq's own CLI on genloop's worker module, configured through the environment."""
    import os

    from . import pool as w

    env = dict(os.environ)
    env.update({
        w.ENV_REDIS: args.redis, w.ENV_ARTIFACTS: args.artifacts, w.ENV_QUEUES: args.queues,
        w.ENV_IMPORTS: ",".join(args.imports), w.ENV_PRELOAD: ",".join(args.preload),
        w.ENV_LEASE_TTL: str(args.lease_ttl), w.ENV_HEARTBEAT_MS: str(args.heartbeat_timeout_ms),
    })
    argv = [sys.executable, "-m", "dramatiq", "genloop.workers.worker_main",
            "--processes", str(args.processes), "--threads", str(args.threads),
            "--queues", *args.queues.split(",")]
    os.execve(sys.executable, argv, env)
    return 0  # not reached


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    loop = Loop(
        prompt=args.prompt, candidates=args.candidates, rounds=args.rounds, model=args.model,
        evaluator=args.evaluator, steps=args.steps, refiner=args.refiner,
    )
    with _client(args) as client:
        summary = run_demo(client, loop, Path(args.out), progress=not args.quiet)
    print(summary)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="genloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, fn, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--home", default=DEFAULT_HOME, help="embedded state directory")
        p.add_argument("--threads", type=int, default=4, help="embedded worker threads")
        p.add_argument("--redis", help="use the worker pool on this Redis instead (redis://...)")
        p.set_defaults(fn=fn)
        return p

    p = command("run", cmd_run, "run a Graph or Loop from a JSON file and print its result")
    p.add_argument("file")
    p.add_argument("--idempotency-key")
    p.add_argument("--timeout", type=float, default=None)

    p = command("status", cmd_status, "print a run's status")
    p.add_argument("run")

    p = command("events", cmd_events, "print a run's events as JSON lines")
    p.add_argument("run")
    p.add_argument("--after", type=int, default=0, help="only events after this id")
    p.add_argument("--follow", action="store_true", help="keep printing until the run ends")

    p = command("resume", cmd_resume, "finish an interrupted run, reusing stored results")
    p.add_argument("run")
    p.add_argument("--timeout", type=float, default=None)

    p = sub.add_parser("worker", help="start Dramatiq worker processes on a Redis pool")
    p.set_defaults(fn=cmd_worker)
    p.add_argument("--redis", required=True, help="redis://host:6379/0")
    p.add_argument("--artifacts", required=True, help="file:///shared/dir or s3://bucket/prefix")
    p.add_argument("--queues", default="gpu,cpu", help="comma-separated queues to consume")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--import", dest="imports", action="append", default=[],
                   help="module defining custom ops (repeatable)")
    p.add_argument("--preload", action="append", default=[], help="model to load at start")
    p.add_argument("--lease-ttl", type=float, default=60.0, help="claim lease, seconds")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=60_000,
                   help="requeue a dead worker's messages after this long")

    p = command("demo", cmd_demo, "run a generate-evaluate-refine loop and write a contact sheet")
    p.add_argument("--out", default="out/demo")
    # The shapes models are trained here and ship in the package: their images can be judged
    # by eye and by genloop.workers.shapes.check, unlike the random-weight `tiny` ones.
    p.add_argument("--prompt", default="a large red circle in the centre, black background")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--model", default="shapes")
    p.add_argument("--evaluator", default="shapes-clip")
    p.add_argument("--refiner", default="seed-search")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    from .gateway.cli import register as register_gateway

    register_gateway(sub)  # serve, keys
    from genloop.campaign.cli import register as register_campaign

    register_campaign(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except GenloopError as exc:
        print(f"genloop {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
