"""Every example runs, on small settings, as a user would run it."""

from __future__ import annotations

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
    # The shipped spec, scaled down: two variants, one round of two candidates.
    import yaml

    spec = yaml.safe_load((EXAMPLES / "campaign.yaml").read_text())
    spec["axes"].update(product=["large red circle"], place=["in the centre"])
    del spec["copy"]["headlines"]["large blue square"]
    spec["loop"].update(rounds=1, candidates=2, steps=6)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = run_example("campaign.py", "--spec", str(tmp_path / "spec.yaml"), "--home",
                      str(tmp_path / "home"), "--out", str(tmp_path / "out"))
    assert out.startswith("{'succeeded': 2}")
    from genloop.campaign.manifest import read_manifest

    manifest = read_manifest(tmp_path / "out/shapes-launch")
    assert {len(v.formats) for v in manifest.variants} == {4}
    # 1:1 is the pick's own shape; the others are drawn at theirs (generate_formats).
    assert {name: out.method for name, out in manifest.variants[0].formats.items()
            if name != "1:1"} == {"4:5": "generate", "9:16": "generate", "1.91:1": "generate"}


@pytest.mark.slow
def test_custom_op(tmp_path):
    out = run_example("custom_op.py", "--home", str(tmp_path))
    assert out.startswith("succeeded; best score")
