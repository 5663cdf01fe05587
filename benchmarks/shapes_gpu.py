"""Shapes world v2 on a lent GPU, in one command: retrain everything, evaluate, bring it back.

    make shapes-gpu                                    # on the GPU machine; writes $OUT
    python3 benchmarks/shapes_gpu.py --out DIR [--budget-seconds 240] [--workers 8]
    python3 benchmarks/shapes_gpu.py --device cpu --smoke --out DIR   # the plumbing, on a CPU

1. ``train``: ``python -m genloop.shapes.training.train --recipe gpu --budget-seconds S``:
   VAE + UNet + text encoder beside clean shapes-clip, mining, hard-negative fine-tuning,
   every loop as many steps as fit in ``S`` seconds.
2. ``evaluate``: ``python -m genloop.shapes.training.evaluate`` on the new weights with the
   shipped ones as ``--old-weights``: generator clause rates and all-correct (one object, two
   objects, held-out combinations), CLIP true-caption-first per clause, selection AUC new vs
   old, and the VAE round trip (the generator's ceiling).
3. The weights folder goes into ``--out`` as one tar in parts of at most :data:`PART_BYTES`
   (the GPU tool brings back 8 files of at most 16 MiB): ``cat shapes_v2_weights.tar.* | tar x``.

``--out`` receives ``shapes_v2.json`` (each step's ``rc``, ``wall_s`` and figures or error; the
train report with steps run and seconds per step), ``shapes_v2.log`` (each step's output) and
the weight parts. The JSON is rewritten after every step, so a run killed from outside still
leaves what finished. Each step has its own timeout; a failed step is recorded and the next
runs when it can. Where genloop is not installed (the GPU image), the checkout is put on
``sys.path`` as ``genloop`` the way ``gpu_check.py`` does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import REPO, genloop_path, run_logged  # noqa: E402

PYTHON = sys.executable
#: Largest weight part (the GPU tool brings back files of at most 16 MiB).
PART_BYTES = 15 * 2**20
#: Seconds beyond ``--budget-seconds`` that training may take (imports, rendering, saving,
#: mining) before it is stopped, and the evaluation's own limit.
TRAIN_SLACK_S = 120
EVALUATE_S = 180


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "out/shapes-v2",
                    help="folder for the JSON, the log and the weight parts (default: $OUT)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-seconds", type=float, default=240.0,
                    help="training seconds, all loops together (evaluation comes after)")
    ap.add_argument("--workers", type=int, default=8,
                    help="processes that render images and run the checker, per stage")
    ap.add_argument("--n", type=int, default=400, help="held-out prompts per generator set")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the plumbing, on a CPU")
    args = ap.parse_args(argv)
    if args.budget_seconds <= 0:
        ap.error("--budget-seconds must be > 0")
    return args


def step_commands(args: argparse.Namespace, work: Path) -> dict[str, list[str]]:
    """The command line of each step, in order."""
    weights = work / "weights"
    train = [PYTHON, "-m", "genloop.shapes.training.train", "--out", str(weights),
             "--device", args.device, "--workers", str(args.workers), "--threads", "2",
             "--mining-threads", "4"]
    train += ["--smoke", "--sequential"] if args.smoke else [
        "--recipe", "gpu", "--budget-seconds", str(args.budget_seconds)]
    n = 2 if args.smoke else args.n
    evaluate = [PYTHON, "-m", "genloop.shapes.training.evaluate", "--weights", str(weights),
                "--old-weights", str(REPO / "shapes" / "weights"),
                "--device", args.device, "--workers", str(args.workers), "--threads", "4",
                "--n", str(n), "--clip-n", str(n), "--auc-prompts", str(2 if args.smoke else 100),
                "--auc-images", str(2 if args.smoke else 8), "--out", str(work / "figures.json")]
    evaluate += ["--steps", "2"] if args.smoke else []
    return {"train": train, "evaluate": evaluate}


def run_step(cmd: list[str], env: dict[str, str], timeout: float, log: Path,
             name: str) -> dict:
    stdout, stderr, rc, wall = run_logged(cmd, env, timeout, log, name)
    result: dict = {"rc": rc, "wall_s": wall}
    if rc != 0:
        result["stderr_tail"] = stderr[-2000:]
    return result


def pack(folder: Path, out: Path, stem: str = "shapes_v2_weights.tar",
         part_bytes: int = PART_BYTES) -> dict:
    """``folder`` as one tar in ``out``, split into parts of at most ``part_bytes``."""
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / stem
        with tarfile.open(whole, "w") as tar:
            tar.add(folder, arcname=folder.name)
        data = whole.read_bytes()
    parts = []
    for i, lo in enumerate(range(0, len(data), part_bytes)):
        part = out / f"{stem}.{i:02d}"
        part.write_bytes(data[lo:lo + part_bytes])
        parts.append(part.name)
    return {"parts": parts, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "unpack": f"cat {stem}.* | tar x"}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        import genloop.shapes.training  # noqa: F401

        path_entry = ""
    except ImportError:
        path_entry = genloop_path(Path(os.environ.get("TMPDIR", "/tmp")))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path_entry, env.get("PYTHONPATH")) if p)
    work = Path(tempfile.mkdtemp(prefix="shapes-v2-"))
    target, log = out / "shapes_v2.json", out / "shapes_v2.log"
    log.write_text("")
    report: dict = {"device": args.device, "budget_seconds": args.budget_seconds,
                    "smoke": args.smoke, "steps": {}}
    limits = {"train": args.budget_seconds + TRAIN_SLACK_S, "evaluate": EVALUATE_S}
    if args.smoke:  # a shared CPU is slow and nothing is lent by the minute
        limits = {name: 3600.0 for name in limits}
    for name, cmd in step_commands(args, work).items():
        print(f"[shapes-v2] {name} (up to {limits[name]:.0f}s)", flush=True)
        step = run_step(cmd, env, limits[name], log, name)
        source = {"train": work / "weights" / "train-report.json",
                  "evaluate": work / "figures.json"}[name]
        try:
            step["result"] = json.loads(source.read_text())
        except Exception as exc:  # noqa: BLE001  (a step's failure is a figure, not a stop)
            step["error"] = f"{type(exc).__name__}: {exc}"[:300]
        report["steps"][name] = step
        report["elapsed_s"] = round(time.monotonic() - start, 1)
        target.write_text(json.dumps(report, indent=1, default=str))
        print(f"[shapes-v2] {name}: rc={step['rc']} {step['wall_s']}s "
              f"{step.get('error', '')}", flush=True)
        if name == "train" and "error" in step:
            break  # no weights: nothing to evaluate
    if (work / "weights" / "shapes-sd").exists():
        report["weights"] = pack(work / "weights", out)
    report["elapsed_s"] = round(time.monotonic() - start, 1)
    target.write_text(json.dumps(report, indent=1, default=str))
    print(f"shapes-v2: {target} ({report['elapsed_s']}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
