"""One prepared GPU check: everything genloop needs measured on a CUDA machine, in one command.

    make gpu-check                   # on the GPU machine; writes $OUT/gpu_check.json
    python3 benchmarks/gpu_check.py --out DIR [--budget 400] [--only env,kernel_tests,...]
    python3 benchmarks/gpu_check.py --device cpu --tiny --out DIR   # the plumbing, on a CPU

Sections, in order (:data:`SECTIONS`), each in its own process with its own timeout:

=================  ==========================================================================
``env``            GPU, versions, device copy GB/s and bf16 matmul TFLOP/s (the ceilings)
``kernel_tests``   ``pytest tests/kernel_ops`` with the interpreter OFF: compiled for the GPU,
                   checked against float32 references
``attention``      ``benchmarks/kernel_speed.py --only attention``: INT8 vs default SDPA, flash and
                   cuDNN on diffusers-layout shapes, accuracy asserted before timing
``groupnorm``      ``benchmarks/kernel_speed.py --only groupnorm``: fused vs torch vs a copy
``unet``           SDXL-sized UNet, random weights, fp16, with and without the kernels
``transformers``   SD3- and Flux-shaped transformers (a few full-width layers, random weights)
                   at 1024 px: the stock processors with INT8 SDPA forced vs unwrapped, and
                   what dispatch picks unforced
``engine``         the engine on ``shapes`` in fp16: batching, DeepCache (host-side step
                   counter: PSNR and full/cached calls), OOM splits, eviction
``compile``        regional ``torch.compile`` of ``shapes`` with batch buckets (3 reuses 4's
                   code), PSNR vs eager, then ``reduce-overhead`` (CUDA graphs) + DeepCache
``generation``     ``benchmarks/generation.py --device cuda --model shapes --json``
=================  ==========================================================================

``--out`` receives two files: ``gpu_check.json`` (every figure, per section: ``rc``, ``wall_s``,
``result`` or ``error``) and ``gpu_check.log`` (each section's command, stdout and stderr).

Robust by construction, because the GPU is lent for minutes: a section that fails, crashes or
times out records its error and the next one runs; a global ``--budget`` (seconds) shrinks the
later sections' timeouts and skips what no longer fits; the JSON is rewritten after every
section, so a run killed from outside still leaves every finished figure in ``--out``.

The lent machine's image has torch and Triton but not genloop's other dependencies, and genloop
is not installed there: the missing packages travel as wheels (:data:`WHEELS`; ``make gpu-wheels``
downloads them into ``.whl``, ``make gpu-check`` installs them), and this script puts the
checkout on ``sys.path`` as ``genloop`` itself (a folder of links) when ``import genloop`` fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

#: What the GPU image lacks, pinned to the versions CI tests with (cp312 manylinux for the
#: binary ones). ``make gpu-wheels`` downloads them into ``.whl``; tests/test_gpu_check.py keeps
#: this list equal to the versions installed here.
WHEELS = [
    "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "typing-extensions==4.16.0", "tenacity==9.2.1",
    "diffusers==0.42.1", "importlib-metadata==10.2.0", "lazy-importer==0.1.0", "zipp==4.1.2",
    "open-clip-torch==3.3.0", "ftfy==6.3.1", "wcwidth==0.9.4",
]

#: name -> the seconds it may take on an H200 (its timeout, shrunk further by ``--budget``).
#: They add up to the default budget, so the whole check ends within 8 minutes.
#: ``generation`` had 50 s on the first H200 run and was cut off before it printed its JSON
#: (imports, the shapes model, CLIP scoring and 3 variants x 2 repeats of 32 images).
#: ``transformers`` and ``compile`` write their JSON after every stage, so a timeout keeps what
#: they measured.
SECTIONS: dict[str, int] = {
    "env": 35,
    "kernel_tests": 90,
    "attention": 50,
    "groupnorm": 35,
    "unet": 40,
    "transformers": 35,
    "engine": 50,
    "compile": 50,
    "generation": 70,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "out/gpu-check",
                    help="folder for gpu_check.json and the logs (default: $OUT)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (CPU plumbing check)")
    ap.add_argument("--budget", type=float, default=float(sum(SECTIONS.values())),
                    help="seconds for the whole check; later sections shrink to fit")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="comma-separated sections to run, in the fixed order")
    ap.add_argument("--wheels", action="store_true",
                    help="print the wheels the GPU image needs (name==version) and exit")
    args = ap.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.budget <= 0:
        ap.error("--budget must be > 0")
    return args


def genloop_path(scratch: Path) -> str:
    """A ``sys.path`` entry under which ``import genloop`` finds this checkout's code.

    Where genloop is installed (``pip install -e .``) that is nothing new; elsewhere (the GPU
    image) a folder ``genloop/`` of links to the checkout's top-level packages, the same
    mapping as ``package-dir`` in pyproject.toml.
    """
    farm = scratch / "genloop-src"
    pkg = farm / "genloop"
    pkg.mkdir(parents=True, exist_ok=True)
    for name, folder in package_dirs().items():
        link = pkg / name
        if not link.exists():
            link.symlink_to(REPO / folder, target_is_directory=True)
    return str(farm)


def package_dirs() -> dict[str, str]:
    """``genloop.X`` -> its folder, as pyproject.toml's ``package-dir`` maps them."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name.removeprefix("genloop."): folder for name, folder in mapping.items()}


def section_command(name: str, args: argparse.Namespace, out: Path) -> list[str]:
    """The command line of section ``name`` (the work itself lives in other scripts)."""
    bench = REPO / "benchmarks"
    tiny = ["--tiny"] if args.tiny else []
    if name == "kernel_tests":
        # --confcutdir: only tests/kernel_ops' own conftest, not the suite's (Redis, dramatiq...).
        cmd = [PYTHON, "-m", "pytest", str(REPO / "tests" / "kernel_ops"), "-q", "-p",
               "no:cacheprovider", f"--confcutdir={REPO / 'tests' / 'kernel_ops'}",
               f"--junitxml={out / 'kernel_tests.xml'}", "-o", "addopts="]
        if args.tiny:
            return cmd + ["-k", "dispatch and not sdk"]
        if importlib.util.find_spec("xdist") is not None:
            cmd += ["-n", "4"]  # Triton compiles each kernel variant: spread it over the cores
        return cmd
    if name in ("attention", "groupnorm"):
        return [PYTHON, str(bench / "kernel_speed.py"), "--json", "--only", name, "--device",
                args.device, *tiny]
    if name == "generation":
        model = ["--model", "tiny", "--images", "2", "--repeats", "1"] if args.tiny else [
            "--model", "shapes", "--images", "16", "--repeats", "2"]
        return [PYTHON, str(bench / "generation.py"), "--device", args.device, "--json", *model]
    return [PYTHON, str(bench / "gpu_sections.py"), name, "--device", args.device,
            "--out", str(out / f"{name}.json"), *tiny]


def section_env(args: argparse.Namespace, path_entry: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path_entry, env.get("PYTHONPATH")) if p)
    if args.device.startswith("cuda"):
        env["TRITON_INTERPRET"] = "0"  # compiled kernels: never the interpreter on a GPU
    else:
        env["TRITON_INTERPRET"] = "1"
    return env


def junit_summary(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failed = []
    for case in suite.iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}: "
                          f"{bad.get('message', '')[:300]}")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {**counts, "failed": failed}


def json_output(stdout: str, rc: int | str, timeout: float) -> dict:
    """The JSON object a benchmark printed (``--json``), among whatever else it printed.

    Raises ``ValueError`` naming the likely cause when there is none: the section was stopped
    at its timeout before printing, or exited with an error.
    """
    decoder = json.JSONDecoder()
    best: tuple[int, dict] | None = None  # the longest object: the report, not a log line's
    at = stdout.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(stdout, at)
        except json.JSONDecodeError:
            at = stdout.find("{", at + 1)
            continue
        if isinstance(value, dict) and (best is None or end - at > best[0]):
            best = (end - at, value)
        at = stdout.find("{", end)
    if best is not None:
        return best[1]
    if rc == "timeout":
        raise ValueError(f"timed out after {timeout:.0f}s before printing its JSON")
    raise ValueError(f"no JSON object in its output (rc={rc}; see stderr_tail)")


def run_logged(cmd: list[str], env: dict[str, str], timeout: float, log: Path,
               name: str) -> tuple[str, str, int | str, float]:
    """Run ``cmd`` from the repository with a time limit, appending its output to ``log``:
    (stdout, stderr, exit status or "timeout", wall seconds)."""
    t = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout, check=False)
        stdout, stderr, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = "timeout"
    with log.open("a") as f:
        f.write(f"=== {name}\n$ {' '.join(cmd)}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n")
    return stdout, stderr, rc, round(time.monotonic() - t, 1)


def run_section(name: str, args: argparse.Namespace, out: Path, env: dict[str, str],
                timeout: float, log: Path) -> dict:
    """Run section ``name`` with its files in ``out`` (scratch); append its output to ``log``."""
    stdout, stderr, rc, wall = run_logged(section_command(name, args, out), env, timeout,
                                          log, name)
    result: dict = {"rc": rc, "wall_s": wall}
    try:
        if name == "kernel_tests":
            result["result"] = junit_summary(out / "kernel_tests.xml")
        elif name in ("attention", "groupnorm", "generation"):
            result["result"] = json_output(stdout, rc, timeout)
        else:
            result["result"] = json.loads((out / f"{name}.json").read_text())
    except Exception as exc:  # noqa: BLE001  (a section's failure is a figure, not a stop)
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    if "error" in result or rc != 0:
        result["stderr_tail"] = stderr[-2000:]
    return result


def summary(report: dict) -> list[str]:
    lines = []
    for name, r in report["sections"].items():
        status = "ok" if r.get("rc") == 0 and "error" not in r else f"FAILED (rc={r.get('rc')})"
        lines.append(f"{name:13} {status:18} {r.get('wall_s', '-')!s:>6}s  "
                     f"{str(r.get('error', ''))[:100]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.wheels:
        print("\n".join(WHEELS))
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        import genloop.kernels  # noqa: F401

        path_entry = ""
    except ImportError:
        path_entry = genloop_path(Path(os.environ.get("TMPDIR", "/tmp")))
    env = section_env(args, path_entry)
    report: dict = {"device": args.device, "tiny": args.tiny, "budget_s": args.budget,
                    "sections": {}}
    # Two files in --out (the GPU tool brings back at most 8): the JSON and one log; the
    # sections' own files stay in a scratch folder.
    target, log = out / "gpu_check.json", out / "gpu_check.log"
    log.write_text("")
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    wanted = args.only.split(",")
    for name, cap in SECTIONS.items():
        if name not in wanted:
            continue
        left = args.budget - (time.monotonic() - start)
        if left < 15:
            report["sections"][name] = {"rc": "skipped", "error": "global budget spent"}
            continue
        timeout = left if args.tiny else min(cap, left)
        print(f"[gpu-check] {name} (up to {timeout:.0f}s)", flush=True)
        try:
            report["sections"][name] = run_section(name, args, work, env, timeout, log)
        except Exception as exc:  # noqa: BLE001  (this script's own bug must not end the run)
            report["sections"][name] = {"rc": "crashed", "error": f"{type(exc).__name__}: {exc}"}
        report["elapsed_s"] = round(time.monotonic() - start, 1)
        target.write_text(json.dumps(report, indent=1, default=str))
        print(f"[gpu-check] {summary({'sections': {name: report['sections'][name]}})[0]}",
              flush=True)
    print("\n".join(["", f"gpu-check: {target}", *summary(report)]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
