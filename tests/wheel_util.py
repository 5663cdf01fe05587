"""Build genloop's wheel and sdist and install the wheel in fresh venvs, as a user would.

The tests run from an editable checkout, so a file missing from the built artifact (weights,
templates) or a CLI that needs an extra at start-up would go unnoticed without this.

Cost on a 2-core CI machine: the fresh venvs get pip's normal resolution from the configured
indexes, except torch. torch (and what it pulls: CUDA libraries, triton) is gigabytes; the
``workers`` venv reuses this interpreter's installed copy through a ``.pth`` file that points at
a folder of symlinks to exactly those distributions, so pip sees torch as installed and resolves
everything else normally. Nothing from the checkout is on the venv's ``sys.path``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Distributions the workers venv takes from this interpreter instead of installing afresh.
REUSED_ROOTS = ("torch", "torchvision")


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path
    log: str
    seconds: float


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that points back into the checkout or its venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE"}}
    env.update(extra)
    return env


def build(out: Path) -> Dist:
    """sdist first, then the wheel from the unpacked sdist (``python -m build``'s default), so
    a file the sdist forgets is missing from the wheel too. ``--no-isolation`` uses this venv's
    setuptools rather than fetching one."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, env=clean_env(), timeout=600,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"build failed:\n{log}")
    (wheel,) = out.glob("genloop-*.whl")
    (sdist,) = out.glob("genloop-*.tar.gz")
    return Dist(wheel, sdist, log, time.monotonic() - start)


def setuptools_warnings(log: str) -> list[str]:
    """Lines of a build log that warn about the project (not about this machine's settings)."""
    return [line for line in log.splitlines()
            if re.search(r"warn|would be ignored|deprecat", line, re.I)]


def _closure(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    """``roots`` and every distribution they require, as installed here: markers evaluated and
    extras followed (torch pulls its CUDA libraries through ``cuda-toolkit[...]`` extras)."""
    from packaging.requirements import Requirement

    seen: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(name, "") for name in roots]
    while todo:
        name, extra = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if (key, extra) in done:
            continue
        done.add((key, extra))
        try:
            dist = seen.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement not installed here: pip will resolve it
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return list(seen.values())


def link_reused(site: Path, roots: tuple[str, ...] = REUSED_ROOTS) -> int:
    """Make ``roots`` and their dependencies importable in the venv at ``site`` by symlink."""
    shelf = site.parent / "reused-site"
    shelf.mkdir(exist_ok=True)
    count = 0
    for dist in _closure(roots):
        origin = Path(str(dist.locate_file("")))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        tops.add(Path(str(dist._path)).name)  # type: ignore[attr-defined]  (the .dist-info)
        for top in tops:
            target = shelf / top
            if (origin / top).exists() and not target.exists():
                target.symlink_to(origin / top)
                count += 1
    (site / "_genloop_reused.pth").write_text(f"{shelf}\n")
    return count


def make_venv(path: Path, wheel: Path, extra: str | None = None) -> float:
    """A fresh venv with the wheel installed (``extra`` too); returns the seconds it took."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   env=clean_env())
    python = path / "bin" / "python"
    if extra == "workers":
        site = Path(subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip())
        link_reused(site)
    requirement = f"{wheel}[{extra}]" if extra else str(wheel)
    # This interpreter's pip installs into the venv (``--python``): no pip bootstrap per venv.
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
         "--disable-pip-version-check", requirement],
        capture_output=True, text=True, env=clean_env(), timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pip install {requirement} failed:\n{proc.stdout}{proc.stderr}")
    return time.monotonic() - start


def run_in(venv: Path, *args: str, cwd: Path, timeout: float = 300,
           **env: str) -> subprocess.CompletedProcess:
    """Run a venv's program (``python``, ``genloop``) from ``cwd``, away from the checkout."""
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True,
                          text=True, cwd=cwd, env=clean_env(**env), timeout=timeout)
