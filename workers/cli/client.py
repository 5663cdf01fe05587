"""The ``genloop`` commands that drive runs through a :class:`~genloop.sdk.Client`.

Each takes a back end: ``--home`` (embedded, the default; needs the ``workers`` extra),
``--redis URL`` (a worker pool; ``workers`` extra) or ``--gateway URL --api-key KEY`` (a gateway;
the base install is enough). Imports stay inside the bodies: this module loads on a base install.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genloop.sdk import Client

DEFAULT_HOME = ".genloop"
API_KEY_ENV = "GENLOOP_API_KEY"


def add_target(p: argparse.ArgumentParser) -> None:
    """The back-end options every client-side command shares."""
    p.add_argument("--home", default=DEFAULT_HOME, help="embedded state directory (default)")
    p.add_argument("--threads", type=int, default=4, help="embedded worker threads")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--redis", help="use the worker pool on this Redis instead (redis://...)")
    where.add_argument("--gateway", metavar="URL", help="use this genloop gateway (http://...)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"the gateway's API key (default: ${API_KEY_ENV})")


def open_client(args: argparse.Namespace, workers: bool = True) -> Client:
    from genloop.sdk import Client

    if args.gateway:
        return Client.http(args.gateway, api_key=args.api_key)
    if args.redis:
        return Client.connect(args.redis)
    # Without worker threads the embedded runtime only reads the store: `status` and `events`
    # must never start executing a run another process is driving.
    return Client.local(home=args.home, threads=args.threads if workers else 0)


def _command(p: argparse.ArgumentParser, fn, run_id: bool = True) -> None:
    add_target(p)
    if run_id:
        p.add_argument("run", help="the run id")
    p.set_defaults(fn=fn)


def cmd_run(args: argparse.Namespace) -> int:
    from pydantic import TypeAdapter, ValidationError

    from genloop.sdk import RunSpec

    try:
        spec = TypeAdapter(RunSpec).validate_json(Path(args.file).read_bytes())
    except (OSError, ValidationError) as exc:
        print(f"genloop run: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    with open_client(args) as client:
        run = client.submit(spec, idempotency_key=args.idempotency_key)
        print(f"run {run.id} submitted", file=sys.stderr)
        if args.no_wait:
            print(run.info.model_dump_json(indent=2))
            return 0
        result = run.wait(timeout=args.timeout)
        print(result.model_dump_json(indent=2))
        return 0 if result.status == "succeeded" else 1


def setup_run(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_run, run_id=False)
    p.add_argument("file", help="a JSON Graph or Loop")
    p.add_argument("--idempotency-key")
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--no-wait", action="store_true", help="print the run's status and return")


def cmd_status(args: argparse.Namespace) -> int:
    with open_client(args, workers=False) as client:
        print(client.get(args.run).info.model_dump_json(indent=2))
    return 0


def setup_status(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_status)


def cmd_runs(args: argparse.Namespace) -> int:
    """One line a run, newest first: id, status, created (UTC), labels; ``--json`` for JSON
    lines."""
    from datetime import UTC, datetime

    from genloop.sdk.labels import parse_label

    try:
        labels = dict(parse_label(text) for text in args.label)
    except ValueError as exc:
        print(f"genloop runs: {exc}", file=sys.stderr)
        return 2
    with open_client(args, workers=False) as client:
        listed = client.runs(status=args.status, labels=labels, page_size=min(args.limit, 200))
        for n, run in enumerate(listed):
            if n == args.limit:
                break
            if args.json:
                print(run.model_dump_json(exclude={"nodes"}), flush=True)
                continue
            created = datetime.fromtimestamp(run.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
            tags = " ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))
            print(f"{run.id}  {run.status.value:<9}  {created}  {tags}".rstrip(), flush=True)
    return 0


def setup_runs(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_runs, run_id=False)
    p.add_argument("--status", action="append", help="only runs in this state (repeatable)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="only runs with this label (repeatable: every one must match)")
    p.add_argument("--limit", type=int, default=50, help="most runs to print (default 50)")
    p.add_argument("--json", action="store_true", help="one RunInfo JSON a line")


def cmd_events(args: argparse.Namespace) -> int:
    with open_client(args, workers=False) as client:
        for event in client.get(args.run).events(after=args.after, follow=args.follow):
            print(event.model_dump_json(exclude_none=True), flush=True)
    return 0


def setup_events(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_events)
    p.add_argument("--after", type=int, default=0, help="only events after this id")
    p.add_argument("--follow", action="store_true", help="keep printing until the run ends")


def cmd_result(args: argparse.Namespace) -> int:
    with open_client(args, workers=False) as client:
        run = client.get(args.run)
        result = run.wait(timeout=args.timeout) if args.wait else run.result()
        print(result.model_dump_json(indent=2))
        return 0 if result.status == "succeeded" or not args.wait else 1


def setup_result(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_result)
    p.add_argument("--wait", action="store_true",
                   help="wait for the run to end; exit 1 unless it succeeded")
    p.add_argument("--timeout", type=float, default=None)


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_client(args, workers=False) as client:
        print(client.get(args.run).cancel().model_dump_json(indent=2))
    return 0


def setup_cancel(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_cancel)


def cmd_resume(args: argparse.Namespace) -> int:
    with open_client(args) as client:
        result = client.resume(args.run).wait(timeout=args.timeout)
        print(result.model_dump_json(indent=2))
        return 0 if result.status == "succeeded" else 1


def setup_resume(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_resume)
    p.add_argument("--timeout", type=float, default=None)


def cmd_artifact_get(args: argparse.Namespace) -> int:
    with open_client(args, workers=False) as client:
        data = client.read_artifact(args.key)
    if args.output in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(args.output).write_bytes(data)
        print(f"wrote {len(data)} bytes to {args.output}", file=sys.stderr)
    return 0


def setup_artifact(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True)
    get = actions.add_parser("get", help="write an artifact's bytes to a file (or stdout)")
    _command(get, cmd_artifact_get, run_id=False)
    get.add_argument("key", help="the artifact key, e.g. a candidate's `artifact`")
    get.add_argument("-o", "--output", help="file to write (default: stdout)")


def cmd_schema(args: argparse.Namespace) -> int:
    with open_client(args, workers=False) as client:
        schema = client.schema()
    if args.only:
        print(json.dumps(getattr(schema, args.only), indent=2))
    else:
        print(schema.model_dump_json(indent=2))
    return 0


def setup_schema(p: argparse.ArgumentParser) -> None:
    _command(p, cmd_schema, run_id=False)
    p.add_argument("--only", choices=["graph", "loop", "served"],
                   help="print only this part (e.g. the Loop JSON Schema for an agent)")
