"""Every example runs, on small settings, as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_quickstart(tmp_path):
    out = run_example("quickstart.py", "--home", str(tmp_path), "--n", "4", "--steps", "2")
    assert "node.succeeded   select-1" in out
    assert out.count("bytes of PNG") == 2


@pytest.mark.slow
def test_campaign(tmp_path):
    # The shipped spec's shape, scaled down: two variants, one round of two candidates.
    spec = (EXAMPLES / "campaign.yaml").read_text()
    spec = spec.replace("[large red circle, large blue square]", "[large red circle]")
    spec = spec.replace("[in the centre, on the left, at the top]", "[in the centre]")
    spec = spec.replace("large blue square: The square deal.\n", "")
    spec = spec.replace("rounds: 2", "rounds: 1\n  steps: 6").replace("candidates: 4",
                                                                        "candidates: 2")
    (tmp_path / "spec.yaml").write_text(spec)
    out = run_example("campaign.py", "--spec", str(tmp_path / "spec.yaml"), "--home",
                      str(tmp_path / "home"), "--out", str(tmp_path / "out"))
    assert out.startswith("{'succeeded': 2}")
    manifest = json.loads((tmp_path / "out/shapes-launch/manifest.json").read_text())
    assert {len(v["formats"]) for v in manifest["variants"]} == {4}


@pytest.mark.slow
def test_custom_op(tmp_path):
    out = run_example("custom_op.py", "--home", str(tmp_path))
    assert out.startswith("succeeded; best score")
