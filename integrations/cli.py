"""``genloop mcp``: serve the tools over MCP. Registered into the main CLI; the ``mcp`` package
is imported only when the command runs, so the rest of the CLI works without the extra."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from pydantic import ValidationError

from genloop.sdk import SpecSchema

from .catalog import Catalog


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _served(schema: SpecSchema, args: argparse.Namespace) -> Catalog:
    """What the back end serves that a call can use, with the operator's evaluator options."""
    try:
        options = json.loads(args.evaluator_options or "{}")
        return Catalog.served(schema, evaluator_options=options)
    except (ValueError, ValidationError) as exc:
        raise SystemExit(f"genloop mcp: --evaluator-options: {exc}") from None


def _catalog(served: Catalog, args: argparse.Namespace) -> Catalog:
    """What the back end serves, narrowed to the names given on the command line."""
    chosen = {field: _names(getattr(args, field)) for field in ("models", "evaluators", "refiners")
              if getattr(args, field)}
    unknown = sorted(n for field, names in chosen.items() for n in names
                     if n not in getattr(served, field))
    if unknown:
        raise SystemExit(f"genloop mcp: cannot offer {', '.join(unknown)}: the back end does "
                         "not serve it, or it needs settings (--evaluator-options)")
    return Catalog.model_validate({**served.model_dump(), **chosen})


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from .mcp import build_server
    except ImportError as exc:
        print(f"genloop mcp needs the mcp extra: pip install 'genloop[mcp]' ({exc})",
              file=sys.stderr)
        return 2
    from genloop.sdk import AsyncClient, Client

    from .tools import GenloopTools

    for module in args.imports:  # custom ops register on import
        importlib.import_module(module)
    aclient = None
    if args.gateway:
        key = args.api_key or os.environ.get("GENLOOP_API_KEY")
        client = Client.http(args.gateway, api_key=key)
        aclient = AsyncClient.http(args.gateway, api_key=key)
    elif args.redis:
        client = Client.connect(args.redis)
    else:
        client = Client.local(home=args.local, threads=args.threads)
    with client:
        catalog = _catalog(_served(client.schema(), args), args)
        server = build_server(GenloopTools(client, aclient=aclient, catalog=catalog))
        if args.transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=args.host, port=args.port)
    return 0


def setup(p: argparse.ArgumentParser) -> None:
    """The ``genloop mcp`` command's arguments (the CLI calls this only when ``mcp`` runs)."""
    import mcp  # noqa: F401  (fail at parse time, with the extra named)

    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", metavar="HOME", help="embedded workers with this home")
    where.add_argument("--redis", metavar="URL", help="a Redis worker pool")
    where.add_argument("--gateway", metavar="URL", help="a genloop gateway (genloop serve)")
    p.add_argument("--api-key", help="the gateway's API key (default: $GENLOOP_API_KEY)")
    p.add_argument("--threads", type=int, default=4, help="embedded worker threads")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--models", help="comma-separated models the tools offer, the first the "
                   "default (default: every model the back end serves, its default first)")
    p.add_argument("--evaluators", help="likewise for evaluators")
    p.add_argument("--refiners", help="likewise for refine strategies")
    p.add_argument("--evaluator-options", metavar="JSON", help="settings per evaluator, sent "
                   "with every call naming it; an evaluator that needs some (hf-clip's path, "
                   "aesthetic's head) is offered only once given, e.g. "
                   "'{\"hf-clip\": {\"path\": \"/models/clip\"}}'")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import a module first (custom ops, evaluators); repeatable")
    p.set_defaults(fn=cmd_mcp)
