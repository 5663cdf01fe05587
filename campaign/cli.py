"""``genloop campaign run|status|report``: the campaign runner from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from genloop.sdk import Client

from . import reframe
from .runlog import RunLog
from .runner import RUNS_FILE, Progress, campaign_folder, report, run
from .spec import CampaignSpec, CampaignSpecError, load_spec


def _client(args: argparse.Namespace) -> Client:
    if args.gateway:
        return Client.http(args.gateway, api_key=args.api_key)
    if args.redis:
        return Client.connect(args.redis)
    return Client.local(home=args.local, threads=args.threads)


def _bar(p: Progress) -> None:
    eta = "" if p.eta is None else f", ETA {p.eta:.0f} s"
    sys.stderr.write(f"\r{p.phase} {p.done + p.failed}/{p.total - p.skipped}: {p.done} done, "
                     f"{p.failed} failed, {p.skipped} over budget, {p.images} images{eta}   ")
    sys.stderr.flush()


def _summary(folder: Path, manifest) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(manifest.counts().items()))
    lines = [f"{manifest.name}: {counts}; {manifest.spent_images} images, "
             f"{manifest.spent_steps} denoising steps", f"report: {folder / 'report.html'}"]
    lines += [f"  {v.key} {v.prompt!r}: {v.error}" for v in manifest.variants
              if v.status in ("failed", "cancelled")]
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except CampaignSpecError as exc:
        print(f"genloop campaign run: {exc}", file=sys.stderr)
        return 2
    with _client(args) as client:
        try:
            manifest = run(spec, client, out=args.out, progress=None if args.quiet else _bar,
                           timeout=args.timeout, retry_failed=args.retry_failed)
        except CampaignSpecError as exc:  # a name the back end does not serve
            print(f"genloop campaign run: {exc}", file=sys.stderr)
            return 2
    if not args.quiet:
        sys.stderr.write("\n")
    print(_summary(campaign_folder(spec, args.out), manifest))
    return 0 if all(v.status in ("succeeded", "skipped") for v in manifest.variants) else 1


def _stored_spec(args: argparse.Namespace) -> CampaignSpec | None:
    path = Path(args.out) / args.name / "spec.json"
    if not path.exists():
        print(f"genloop campaign: no campaign {args.name!r} under {args.out} (run it first)",
              file=sys.stderr)
        return None
    return CampaignSpec.model_validate_json(path.read_text())


def _counts(client: Client, runs: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for run_id in runs.values():
        status = client.get(run_id).info.status.value
        counts[status] = counts.get(status, 0) + 1
    return f"{len(runs)} submitted" + "".join(f", {n} {s}" for s, n in sorted(counts.items()))


def cmd_status(args: argparse.Namespace) -> int:
    spec = _stored_spec(args)
    if spec is None:
        return 2
    folder = campaign_folder(spec, args.out)
    loops = RunLog(folder / RUNS_FILE).current()
    formats = RunLog(folder / reframe.RUNS_FILE).current()  # empty until formats are drawn
    with _client(args) as client:
        line = f"{spec.name}: {sum(1 for _ in spec.variants())} variants; loop runs: " \
               f"{_counts(client, loops)}"
        if spec.generate_formats is not None:
            line += f"; format runs: {_counts(client, formats)}"
    print(line)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    spec = _stored_spec(args)
    if spec is None:
        return 2
    with _client(args) as client:
        manifest = report(spec, client, out=args.out, timeout=args.timeout)
    print(_summary(campaign_folder(spec, args.out), manifest))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``campaign`` and its subcommands to an argparse parser's subparsers."""
    setup(sub.add_parser("campaign", help="ad campaigns: a spec file to finished creatives",
                         description="ad campaigns: a spec file to finished creatives"))


def setup(parser: argparse.ArgumentParser) -> None:
    """Add the ``campaign`` subcommands to its parser (a row of ``genloop.workers.cli.main``)."""
    commands = parser.add_subparsers(dest="campaign_command", required=True)

    def command(name: str, fn, help: str) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help, description=help)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--local", default=".genloop", metavar="HOME",
                           help="embedded back end in this process (default .genloop)")
        where.add_argument("--redis", metavar="URL", help="a Redis worker pool")
        where.add_argument("--gateway", metavar="URL", help="a genloop gateway")
        p.add_argument("--api-key", help="the gateway's API key")
        p.add_argument("--threads", type=int, default=4, help="embedded worker threads")
        p.add_argument("--out", default="out/campaigns", help="where campaign folders live")
        p.add_argument("--timeout", type=float, default=None, help="give up after this many s")
        p.set_defaults(fn=fn)
        return p

    p = command("run", cmd_run, "run a campaign spec (YAML, TOML or JSON); re-running resumes")
    p.add_argument("spec")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--retry-failed", action="store_true",
                   help="give variants whose run failed a fresh run (the failure stays in their "
                        "history)")
    command("status", cmd_status, "how far a campaign's runs are").add_argument("name")
    command("report", cmd_report, "rebuild a campaign's folder from its stored runs")\
        .add_argument("name")
