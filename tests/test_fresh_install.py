"""A fresh install holds: no path in the checkout shadows an installed package.

Python started in the checkout puts a folder of it first on ``sys.path``: the root for ``python -c``
and ``python -m pytest``, the script's folder for ``python benchmarks/X.py`` (or ``tools/``),
``tests/`` and its test folders under pytest. A module or package there named like an installed
one wins the import (the repo's ``kernels/`` once hid Hugging Face's ``kernels``, and diffusers
stopped importing). The card folders keep their names and hand a bare import over
(``genloop.sdk.unshadow``); everything else in those folders must simply not take an installed
name.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CARDS = {package.removeprefix("genloop."): folder
         for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items()}

# Imports what a generation worker and the SDK import, then names every top-level module that
# was loaded from a file inside the checkout (genloop itself lives there by design).
IMPORT_EVERYTHING = """
import importlib, json, os, sys
repo = sys.argv[1]
venv = os.path.realpath(sys.prefix)  # a .venv inside the checkout is installed code, not the repo's
from diffusers import (AutoencoderKL, DiffusionPipeline, StableDiffusionImg2ImgPipeline,
                       StableDiffusionPipeline, UNet2DConditionModel)
import open_clip, torchvision, transformers
from transformers import CLIPTextModel, CLIPTokenizer
for package in sys.argv[2:]:
    importlib.import_module(package)
inside = {}
for name, module in list(sys.modules.items()):
    if "." in name or name == "genloop" or module is None:
        continue
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
    where = where and os.path.realpath(where)
    if where and where.startswith(repo + os.sep) and not where.startswith(venv + os.sep):
        inside[name] = where
print(json.dumps(inside))
"""


def _python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` as a user starts it in ``cwd``: no PYTHONPATH, no safe-path mode."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run([sys.executable, "-c", code, str(REPO), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def _packages() -> list[str]:
    """Every genloop package the wheel ships that holds code (data-only folders left out)."""
    return [p for p in PYPROJECT["tool"]["setuptools"]["packages"]
            if (REPO / CARDS[p.split(".")[1]] / "/".join(p.split(".")[2:]) / "__init__.py")
            .exists()]


@pytest.mark.slow
@pytest.mark.parametrize("start", [".", "benchmarks", "examples", "tools"])
def test_the_generation_stack_imports_nothing_from_the_checkout_but_genloop(start):
    # Given Python started in the root (python -c, python -m pytest) or a script folder
    # When it imports diffusers, transformers, open_clip, torchvision and every genloop package
    done = _python(IMPORT_EVERYTHING, REPO / start, *_packages())
    # Then it works, and no top-level module but genloop came from the checkout
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_a_bare_card_name_from_the_root_never_imports_the_card():
    # Given every card folder, each reached by a bare import from the checkout's root
    probe = """
import importlib, json, sys
found = {}
for name in sys.argv[2:]:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        found[name] = "missing: " + str(error)
    else:
        found[name] = getattr(module, "__file__", None) or "namespace"
print(json.dumps(found))
"""
    done = _python(probe, REPO, *CARDS)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    installed = importlib.metadata.packages_distributions()
    for name, where in found.items():
        # Then the name is the installed distribution's, or missing as it is outside the checkout
        assert not where.startswith(str(REPO / CARDS[name])), f"import {name} found its card"
        if name in installed:
            assert where != "namespace" and not where.startswith("missing"), (name, where)
        else:
            assert where.startswith(f"missing: No module named {name!r}: the folder"), where
    assert found["kernels"].endswith(os.path.join("site-packages", "kernels", "__init__.py"))


def _folders_on_sys_path() -> list[Path]:
    """The checkout's folders that a documented start puts on ``sys.path``."""
    tests = REPO / "tests"
    under_pytest = [d for d in tests.iterdir()  # prepend mode inserts a test file's own folder
                    if d.is_dir() and not (d / "__init__.py").exists() and any(d.glob("*.py"))]
    return [REPO, REPO / "benchmarks", REPO / "examples", REPO / "tools", tests, *under_pytest]


def _tracked() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip("not a git checkout: nothing to say which files are the repo's")
    return set(listed.stdout.split())


def test_no_module_or_package_on_a_start_path_takes_an_installed_name():
    # Given the names of installed distributions' top-level modules and of the standard library
    taken = set(importlib.metadata.packages_distributions()) | set(sys.stdlib_module_names)
    tracked = _tracked()
    clashes = []
    for folder in _folders_on_sys_path():
        prefix = "" if folder == REPO else f"{folder.relative_to(REPO)}/"
        entries = {path[len(prefix):].split("/")[0] for path in tracked if path.startswith(prefix)}
        for entry in entries:
            name = entry.removesuffix(".py")
            is_module = entry.endswith(".py")
            is_folder = any(p.startswith(f"{prefix}{entry}/") for p in tracked)
            if not (is_module or is_folder) or name not in taken:
                continue
            # Then only card folders, which hand bare imports over, carry such a name
            if folder == REPO and name in CARDS:
                continue
            clashes.append(f"{prefix}{entry}")
    assert clashes == [], f"rename these: {sorted(clashes)}"
