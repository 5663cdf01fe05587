"""``genloop serve`` and ``genloop keys``: the gateway's commands (rows of
``genloop.workers.cli.main``).

Both point at a back end the same way (``--local HOME`` or ``--redis URL``), so the keys that
``keys create`` makes are the ones ``serve`` checks: ``HOME/gateway.db``, or Redis.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from genloop.sdk.backend import Backend
from genloop.workers.models.models_config import ModelsConfig, models_config

from .limits import TenantLimits
from .store import GatewayStore

#: The operator's token for /metrics on the gateway's own port (an environment variable, not a
#: flag: a command line is visible to every user of the machine).
METRICS_TOKEN_ENV = "GENLOOP_METRICS_TOKEN"

def _target(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", metavar="HOME", help="embedded back end with its home directory")
    where.add_argument("--redis", metavar="URL", help="Redis back end, e.g. redis://host:6379/0")


def open_store(args: argparse.Namespace) -> GatewayStore:
    if args.redis:
        from .redis_store import RedisGatewayStore

        return RedisGatewayStore(args.redis)
    from .sqlite_store import SqliteGatewayStore

    Path(args.local).mkdir(parents=True, exist_ok=True)
    return SqliteGatewayStore(Path(args.local) / "gateway.db")


def open_backend(args: argparse.Namespace, models: ModelsConfig | None = None) -> Backend:
    if args.redis:
        try:
            module = importlib.import_module("genloop.workers.backends.redis_backend")
        except ImportError as exc:
            raise SystemExit(f"genloop serve --redis: no Redis back end here ({exc})") from exc
        backend: Backend = module.RedisBackend(
            args.redis, artifacts=args.artifacts, default_model=args.default_model,
            default_evaluator=args.default_evaluator)
        return backend
    from genloop.workers.backends.embedded import EmbeddedBackend

    # In-process workers serve tenants: only the built-in and configured models load.
    # Tenants take turns: at most one message per worker thread waits in each queue.
    return EmbeddedBackend(args.local, threads=args.threads, models=models or ModelsConfig(),
                           fair_window=args.threads, default_model=args.default_model,
                           default_evaluator=args.default_evaluator)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from genloop.workers.metrics.prometheus import serve_metrics

    from .app import GatewaySettings, create_app

    for module in args.imports:  # custom ops and evaluators register on import
        importlib.import_module(module)
    models = models_config(args.models)
    settings = GatewaySettings(
        max_body_bytes=args.max_body_bytes,
        limits=TenantLimits(max_concurrent_runs=args.max_concurrent_runs,
                            max_candidates_per_run=args.max_candidates,
                            max_cost_per_run=args.max_cost,
                            max_concurrent_cost=args.max_concurrent_cost),
        models=models, max_prompt_chars=args.max_prompt_chars,
        share_results=args.share_results, campaigns=args.campaigns,
        metrics_token=os.environ.get(METRICS_TOKEN_ENV) or None,
        webhook_allow=args.webhook_allow, webhook_deny=args.webhook_deny,
        webhook_backoff=args.webhook_backoff,
    )
    if args.metrics_port is not None:
        port = serve_metrics(args.metrics_port, host=args.metrics_host)
        print(f"metrics on http://{args.metrics_host}:{port}/metrics", file=sys.stderr)
    store, backend = open_store(args), open_backend(args, models)
    try:
        print(f"genloop gateway on http://{args.host}:{args.port} "
              f"(run console: http://{args.host}:{args.port}/ui)", file=sys.stderr)
        app = create_app(backend, store, settings)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
        app.state.gateway.stop()
    finally:
        backend.close()
        store.close()
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    store = open_store(args)
    try:
        if args.action == "create":
            key = store.create_key(args.tenant)
            update = {k: v for k, v in {
                "max_concurrent_runs": args.max_concurrent_runs,
                "max_candidates_per_run": args.max_candidates,
                "max_cost_per_run": args.max_cost,
                "max_concurrent_cost": args.max_concurrent_cost,
                "models": args.models.split(",") if args.models else None,
                "evaluators": args.evaluators.split(",") if args.evaluators else None,
                "priority": args.priority,
            }.items() if v}
            if update:
                limits = store.limits(args.tenant) or TenantLimits()
                store.set_limits(args.tenant, TenantLimits.model_validate(
                    {**limits.model_dump(), **update}))
            print(key)
        elif args.action == "revoke":
            info = store.revoke(args.key)
            if info is None:
                print(f"genloop keys revoke: no such key {args.key!r}", file=sys.stderr)
                return 1
            print(f"revoked {info.id} (tenant {info.tenant})", file=sys.stderr)
        else:
            for info in store.keys():
                created = datetime.fromtimestamp(info.created_at, UTC).isoformat(timespec="seconds")
                state = "revoked" if info.revoked_at else "active"
                print(f"{info.id}  {info.tenant}  {created}  {state}")
    finally:
        store.close()
    return 0


def setup_serve(p: argparse.ArgumentParser) -> None:
    _target(p)
    p.add_argument("--artifacts", help="artifact store of the Redis back end")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--threads", type=int, default=4, help="embedded worker threads")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000)
    p.add_argument("--max-concurrent-runs", type=int, default=8, help="default per tenant")
    p.add_argument("--max-candidates", type=int, default=1024, help="default per run")
    p.add_argument("--max-cost", type=float, default=100_000.0,
                   help="default megapixel-steps per run (retries counted)")
    p.add_argument("--max-concurrent-cost", type=float, default=400_000.0,
                   help="default megapixel-steps of a tenant's unfinished runs")
    p.add_argument("--models", metavar="FILE",
                   help="models config (TOML/JSON): the model names beyond the built-ins")
    p.add_argument("--max-prompt-chars", type=int, default=4000,
                   help="longest prompt (or other string) a spec may hold")
    p.add_argument("--share-results", action="store_true",
                   help="reuse stored results across tenants (they learn what others asked)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import a module first (custom ops); repeatable")
    p.add_argument("--campaigns", metavar="DIR",
                   help="campaign folders (out/campaigns) the console's review pages show")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve /metrics on this port of --metrics-host, apart from the tenants' "
                        f"port (there /metrics answers only with ${METRICS_TOKEN_ENV} as its "
                        "bearer token, and 404 without one set)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="ADDR")
    p.add_argument("--webhook-allow", action="append", default=[], metavar="CIDR",
                   help="also let webhooks go to these addresses (private ones are refused by "
                        "default), e.g. 10.1.0.0/16; repeatable")
    p.add_argument("--webhook-deny", action="append", default=[], metavar="CIDR",
                   help="never let webhooks go to these addresses; repeatable")
    p.add_argument("--webhook-backoff", type=float, default=5.0, metavar="S",
                   help="seconds before a failed delivery's first retry, doubling after each")
    p.add_argument("--log-level", default="info")
    p.add_argument("--default-model", metavar="NAME",
                   help="model for specs that name none (default: shapes, the shipped one)")
    p.add_argument("--default-evaluator", metavar="NAME",
                   help="evaluator for specs that name none (default: shapes-clip)")
    p.set_defaults(fn=cmd_serve)


def setup_keys(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="print a new key for a tenant")
    _target(create)
    create.add_argument("--tenant", required=True)
    create.add_argument("--max-concurrent-runs", type=int, help="this tenant's limit")
    create.add_argument("--max-candidates", type=int, help="this tenant's per-run limit")
    create.add_argument("--max-cost", type=float, help="megapixel-steps per run")
    create.add_argument("--max-concurrent-cost", type=float,
                        help="megapixel-steps of unfinished runs together")
    create.add_argument("--models", help="comma-separated models this tenant may use")
    create.add_argument("--evaluators", help="comma-separated evaluators this tenant may use")
    create.add_argument("--priority", choices=["interactive", "batch"],
                        help="lane of this tenant's runs that name none (default interactive)")
    revoke = actions.add_parser("revoke", help="revoke a key (the key itself or its id)")
    _target(revoke)
    revoke.add_argument("key")
    listing = actions.add_parser("list", help="list keys: id, tenant, created, state")
    _target(listing)
    p.set_defaults(fn=cmd_keys)
