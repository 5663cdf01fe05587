"""Resuming a campaign after SIGKILL: how soon the re-run's work restarts, side by side with a
fresh run of the same spec in a new home.

    python benchmarks/campaign_resume.py [--spec examples/campaign.yaml] [--repeats 3] [--json]

Each repeat starts ``genloop campaign run`` on the spec, kills its process group with SIGKILL
once ``--kill-after`` results are stored, and starts the same command again on the same home.
From the re-run's start it times its first claim (a result key leased by the new process: the
work restarted) and its first new stored result (the first instance it finished); then it
kills it and times the same two events for a fresh run in an empty home. Both sides are the
whole command as a user starts it (interpreter, imports, opening the home). Medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

GENLOOP = Path(sys.executable).with_name("genloop")
POLL = 0.01


def start(spec: Path, home: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([str(GENLOOP), "campaign", "run", str(spec), "--local", str(home),
                             "--out", str(out), "--quiet"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def read(home: Path, sql: str) -> list[tuple]:
    """Rows of the home's state database (none while it does not exist or is locked)."""
    found = list(home.glob("**/*.db"))
    if not found:
        return []
    try:
        with sqlite3.connect(found[0], timeout=0.05) as db:
            return db.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def claimed_by(home: Path, pid: int) -> bool:
    """Whether process ``pid`` holds a claim (lease owners name their process)."""
    return any(f":{pid}:" in (owner or "") for (owner,) in read(home, "SELECT owner FROM claims"))


def results(home: Path) -> int:
    rows = read(home, "SELECT COUNT(*) FROM results")
    return rows[0][0] if rows else 0


def until(check, t0: float, limit: float = 120.0) -> float:
    """Seconds from ``t0`` until ``check()`` holds."""
    while not check():
        if time.monotonic() - t0 > limit:
            raise TimeoutError("the event did not come")
        time.sleep(POLL)
    return time.monotonic() - t0


def restart_times(spec: Path, home: Path, out: Path) -> tuple[float, float]:
    """(first claim, first new result) of a command started now on ``home``."""
    before = results(home)
    t0 = time.monotonic()
    proc = start(spec, home, out)
    try:
        claim = until(lambda: claimed_by(home, proc.pid), t0)
        result = until(lambda: results(home) > before, t0)
    finally:
        stop(proc)
    return claim, result


def repeat(spec: Path, root: Path, kill_after: int) -> dict[str, float]:
    home, out = root / "home", root / "out"
    for path in (home, out):
        shutil.rmtree(path, ignore_errors=True)
    first = start(spec, home, out)
    try:
        until(lambda: results(home) >= kill_after, time.monotonic())
    finally:
        stop(first)
    resumed = restart_times(spec, home, out)
    for path in (home, out):
        shutil.rmtree(path, ignore_errors=True)
    fresh = restart_times(spec, home, out)
    return {"resume_claim_s": resumed[0], "resume_result_s": resumed[1],
            "fresh_claim_s": fresh[0], "fresh_result_s": fresh[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path,
                        default=Path(__file__).resolve().parents[1] / "examples/campaign.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kill-after", type=int, default=8,
                        help="stored results before the first run is killed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trials = [repeat(args.spec.resolve(), Path(tmp), args.kill_after)
                  for _ in range(args.repeats)]
    medians = {key: median(t[key] for t in trials) for key in trials[0]}
    if args.json:
        print(json.dumps({"medians": medians, "trials": trials}, indent=2))
        return
    print(f"campaign resume after SIGKILL ({args.spec.name}, median of {args.repeats})")
    for event in ("claim", "result"):
        resumed, fresh = medians[f"resume_{event}_s"], medians[f"fresh_{event}_s"]
        print(f"  first {event:6}: re-run {resumed:5.2f} s, fresh run {fresh:5.2f} s "
              f"(re-run / fresh {resumed / fresh:.2f})")


if __name__ == "__main__":
    main()
