"""``genloop gc``: collect the artifacts nothing kept names (see :mod:`..artifacts.gc`)."""

from __future__ import annotations

import argparse


def setup_gc(p: argparse.ArgumentParser) -> None:
    from ..stores.retention import duration

    p.set_defaults(fn=cmd_gc)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", help="an embedded runtime's home (Client.local's)")
    where.add_argument("--redis", help="a pool's Redis, redis://host:6379/0 (with --artifacts)")
    p.add_argument("--prefix", default="genloop", help="the pool's key prefix")
    p.add_argument("--artifacts", help="the pool's artifact store (file:///dir, s3://bucket/p)")
    p.add_argument("--grace", type=duration, metavar="TIME",
                   help="keep what was written within this long (default: the retention: "
                   "the one a pool's workers published, else GENLOOP_RETENTION, else 7d)")
    p.add_argument("--dry-run", action="store_true", help="report what would go, delete nothing")
    p.add_argument("--json", action="store_true", help="the report as JSON")


def cmd_gc(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..artifacts import ArtifactStore, LocalArtifactStore, open_artifact_store
    from ..artifacts.gc import collect
    from ..stores.base import StateStore
    from ..stores.retention import configured_retention

    state: StateStore
    artifacts: ArtifactStore
    grace = args.grace
    if args.home is not None:
        from ..stores.sqlite import SqliteStateStore

        home = Path(args.home)
        if not (home / "state.db").is_file():
            raise SystemExit(f"genloop gc: no embedded runtime's store under {home}")
        state, artifacts = SqliteStateStore(home / "state.db"), LocalArtifactStore(
            home / "artifacts")
    else:
        if args.artifacts is None:
            raise SystemExit("genloop gc: --redis needs --artifacts (the pool's artifact store)")
        from ..backends.catalogue import published_retention
        from ..stores.redis import RedisStateStore

        state = RedisStateStore(args.redis, prefix=args.prefix)
        artifacts = open_artifact_store(args.artifacts)
        if grace is None:  # the workers publish their retention
            grace = published_retention(state.client, args.prefix)
    try:
        grace = configured_retention() if grace is None else grace
        report = collect(state, artifacts, grace, dry_run=args.dry_run)
    finally:
        state.close()
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        verb = "would delete" if report.dry_run else "deleted"
        print(f"{report.stored} artifact(s), {report.stored_bytes} bytes: {report.in_use} in use, "
              f"{report.young} written within the grace; {verb} {report.deleted} "
              f"({report.deleted_bytes} bytes)")
    return 0
