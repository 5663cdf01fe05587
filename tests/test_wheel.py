"""The built wheel and sdist, installed in fresh venvs the way a user installs genloop.

Given the wheel built from this checkout, when it is installed alone (base) or with the
``workers`` extra, then the CLI and a real generation work with nothing of the checkout on
``sys.path``. The over-a-gateway half of the base CLI is in tests/gateway/test_base_cli.py.
"""

from __future__ import annotations

import json
import tarfile
import zipfile

import pytest
from wheel_util import ROOT, run_in, setuptools_warnings

# Building the venvs dominates (see wheel_util); the first test to ask for one pays for it.
# One xdist worker builds the wheel and its venvs (session fixtures) for both files.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("wheel")]

#: Files of the checkout the wheel ships as package data: the shapes weights, and the Redis
#: store's scripts (read from the package at import).
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "shapes" / "weights").rglob("*")
                 if p.is_file())
SCRIPTS = sorted(str(p.relative_to(ROOT))
                 for p in (ROOT / "workers" / "stores" / "scripts").glob("*.lua"))


def test_the_build_is_warning_free(built_dist):
    assert "Successfully built" in built_dist.log
    assert setuptools_warnings(built_dist.log) == []


def test_wheel_and_sdist_carry_the_shipped_weights_and_scripts(built_dist):
    assert len(SHIPPED) >= 10 and len(SCRIPTS) >= 8
    wheel = set(zipfile.ZipFile(built_dist.wheel).namelist())
    assert {f"genloop/{f}" for f in SHIPPED + SCRIPTS} <= wheel
    assert "genloop/sdk/py.typed" in wheel
    with tarfile.open(built_dist.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert set(SHIPPED + SCRIPTS) <= names


def test_base_install_imports_no_torch_and_its_cli_names_missing_extras(base_venv, tmp_path):
    code = ("import sys, genloop.sdk, genloop.workers.cli.main; "
            "print(sorted(m for m in ('torch', 'fastapi', 'dramatiq', 'PIL') if m in sys.modules))"
            "; print(genloop.sdk.__file__)")
    out = run_in(base_venv, "python", "-c", code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    loaded, where = out.stdout.splitlines()
    assert loaded == "[]" and where.startswith(str(base_venv))

    helped = run_in(base_venv, "genloop", "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout and "status" in helped.stdout

    for argv in (["serve", "--local", "home"], ["status", "some-run"], ["demo"]):
        proc = run_in(base_venv, "genloop", *argv, cwd=tmp_path)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "pip install 'genloop[workers]'" in proc.stderr


def test_workers_install_generates_a_shapes_image(workers_venv, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"kind": "graph", "nodes": [{
        "id": "gen", "op": "generate",
        "params": {"prompt": "a red circle", "model": "shapes", "n": 1, "steps": 4},
    }]}))
    home = str(tmp_path / "home")

    ran = run_in(workers_venv, "genloop", "run", str(spec), "--home", home, "--threads", "1",
                 cwd=tmp_path, timeout=600)

    assert ran.returncode == 0, ran.stderr
    (candidate,) = json.loads(ran.stdout)["outputs"]["gen"]["items"]
    got = run_in(workers_venv, "genloop", "artifact", "get", candidate["artifact"], "--home",
                 home, "-o", str(tmp_path / "image.png"), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    from PIL import Image

    image = Image.open(tmp_path / "image.png")
    assert image.size == (candidate["width"], candidate["height"])
    weights = run_in(workers_venv, "python", "-c",
                     "import genloop.shapes as s; print(s.weights_dir())", cwd=tmp_path)
    assert weights.stdout.strip().startswith(str(workers_venv)), weights.stdout
