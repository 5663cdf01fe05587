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
    out = run_example("campaign.py", "--home", str(tmp_path), "--candidates", "2",
                      "--rounds", "2", "--steps", "1")
    best = json.loads(out[out.index("{"):])
    assert len(best) == 8 and all(score >= 0 for score in best.values())


@pytest.mark.slow
def test_custom_op(tmp_path):
    out = run_example("custom_op.py", "--home", str(tmp_path))
    assert out.startswith("succeeded; best score")
