"""The ``genloop`` command line. Thin: it parses, calls the library, renders.

Every command is a row of :data:`COMMANDS`: its name, one line of help, and where its arguments
and body live (``module:function``). Only the module of the command being run is imported, so
``genloop --help`` and the client-side commands (``status``, ``events``, ``result``, ``cancel``,
``artifact``, ``schema`` with ``--gateway``) work on the base install (pydantic, httpx); a command
whose module needs an extra says which one in one line and exits 2. A new command (``genloop
mcp``) is one more row.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

#: Top-level modules an extra provides, to name the extra when one of them is missing.
EXTRA_OF = {
    **dict.fromkeys(
        ["dramatiq", "redis", "torch", "torchvision", "diffusers", "transformers", "open_clip",
         "PIL", "safetensors", "tqdm", "boto3", "botocore", "fastapi", "starlette", "uvicorn",
         "numpy"], "workers"),
    "triton": "kernels",
    "yaml": "campaign",
}


@dataclass(frozen=True)
class Command:
    """A ``genloop`` subcommand. ``setup`` (``"module:function"``) receives the command's parser,
    adds its arguments and sets ``fn`` (the body, called with the parsed args, returns the exit
    code); it is imported only when this command runs."""

    name: str
    help: str
    setup: str
    #: The extra to name when a module it needs is missing; default: by module (EXTRA_OF).
    extra: str | None = None


COMMANDS: tuple[Command, ...] = (
    Command("run", "run a Graph or Loop from a JSON file and print its result",
            "genloop.workers.cli.client:setup_run"),
    Command("status", "print a run's status", "genloop.workers.cli.client:setup_status"),
    Command("runs", "list runs, newest first (by status and labels)",
            "genloop.workers.cli.client:setup_runs"),
    Command("events", "print a run's events as JSON lines",
            "genloop.workers.cli.client:setup_events"),
    Command("result", "print a run's result (outputs so far, or --wait for the end)",
            "genloop.workers.cli.client:setup_result"),
    Command("cancel", "ask a run to stop", "genloop.workers.cli.client:setup_cancel"),
    Command("resume", "finish an interrupted run, reusing stored results",
            "genloop.workers.cli.client:setup_resume"),
    Command("artifact", "fetch an artifact (a candidate's image) by key",
            "genloop.workers.cli.client:setup_artifact"),
    Command("schema", "print the Graph/Loop JSON Schema narrowed to what the back end serves",
            "genloop.workers.cli.client:setup_schema"),
    Command("worker", "start Dramatiq worker processes on a Redis pool",
            "genloop.workers.cli.pool:setup_worker"),
    Command("pool", "a Redis pool's workers and backlog (status), or its backlog as Prometheus "
            "metrics (exporter)", "genloop.workers.cli.pool:setup_pool"),
    Command("gc", "delete the artifacts no kept run or result names (--dry-run: report)",
            "genloop.workers.cli.gc:setup_gc"),
    Command("demo", "run a generate-evaluate-refine loop and write a contact sheet",
            "genloop.workers.cli.pool:setup_demo"),
    Command("serve", "run the HTTP gateway", "genloop.gateway.cli:setup_serve"),
    Command("keys", "create, revoke and list the gateway's API keys",
            "genloop.gateway.cli:setup_keys"),
    Command("campaign", "ad campaigns: a spec file to finished creatives",
            "genloop.campaign.cli:setup", extra="campaign"),
    Command("mcp", "serve genloop's agent tools over MCP (stdio or streamable HTTP)",
            "genloop.integrations.cli:setup", extra="mcp"),
)


class MissingExtra(Exception):
    """A command needs a package that an extra of genloop installs."""

    def __init__(self, command: str, extra: str, module: str) -> None:
        super().__init__(f"genloop {command} needs the '{extra}' extra ({module} is not "
                         f"installed): pip install 'genloop[{extra}]'")


def missing_extra(exc: BaseException, command: str) -> MissingExtra | None:
    """The extra behind an ImportError (looked up along its causes), or None for a real bug."""
    seen: BaseException | None = exc
    own = next((c.extra for c in COMMANDS if c.name == command), None)
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            top = seen.name.split(".")[0]
            if top in EXTRA_OF:
                return MissingExtra(command, own or EXTRA_OF[top], top)
        seen = seen.__cause__
    return None


def _load(setup: str) -> Callable[[argparse.ArgumentParser], None]:
    module, _, function = setup.partition(":")
    return getattr(importlib.import_module(module), function)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser of ``command`` (importing its module) beside one-line stubs of the rest.
    Raises :class:`MissingExtra` if that module needs an extra that is not installed."""
    parser = argparse.ArgumentParser(prog="genloop", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for c in COMMANDS:
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        if c.name == command:
            try:
                _load(c.setup)(p)
            except ImportError as exc:
                extra = missing_extra(exc, c.name)
                if extra is None:
                    raise
                raise extra from exc
    return parser


def _command_of(argv: list[str]) -> str | None:
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if any(c.name == first for c in COMMANDS) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = _command_of(argv)
    try:
        args = build_parser(command).parse_args(argv)
    except MissingExtra as exc:
        print(exc, file=sys.stderr)
        return 2
    from genloop.sdk.errors import GenloopError

    try:
        return args.fn(args)
    except GenloopError as exc:
        print(f"genloop {args.command}: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        # Client.local() / connect() import the workers at call time (``status --home`` on a
        # base install); anything else is a bug and keeps its traceback.
        extra = missing_extra(exc, args.command)
        if extra is None:
            raise
        print(extra, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
