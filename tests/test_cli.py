"""The ``genloop`` command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PIL import Image

from genloop.sdk import Graph


def genloop(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genloop.workers.cli.main", *args], capture_output=True, text=True,
        cwd=cwd, timeout=600,
    )


@pytest.mark.slow
def test_demo_writes_result_and_contact_sheet(tmp_path):
    out = tmp_path / "demo"
    proc = genloop("demo", "--out", str(out), "--home", str(tmp_path / "home"),
                   "--rounds", "2", "--candidates", "3", "--steps", "2", "--quiet")

    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "result.json").read_text())
    assert report["status"] == "succeeded"
    assert [r["round"] for r in report["rounds"]] == [1, 2]
    assert all(len(r["candidates"]) == 3 for r in report["rounds"])
    assert all(r["best_score"] == max(c["score"] for c in r["candidates"])
               for r in report["rounds"])
    assert all("verdict" in c["checker"] for r in report["rounds"] for c in r["candidates"])
    assert report["compute"]["images"] == 6
    sheet = Image.open(out / "contact_sheet.png")
    assert sheet.width > 3 * 128 and sheet.height > 2 * 128


@pytest.mark.slow  # a fresh interpreter per command: 8 s of CPU
def test_run_status_and_events_from_a_json_spec(tmp_path):
    g = Graph()
    g.add("test-count", id="only", params={"log": str(tmp_path / "log"), "value": 4})
    spec = tmp_path / "spec.json"
    spec.write_text(g.model_dump_json())
    # The CLI process imports the test ops through this file's directory.
    env_path = str(__import__("pathlib").Path(__file__).parent)
    home = str(tmp_path / "home")

    code = (
        f"import sys; sys.path.insert(0, {env_path!r}); import genloop_test_ops; "
        "from genloop.workers.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )

    def cli(*args):
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, timeout=300)

    ran = cli("run", str(spec), "--home", home)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["outputs"]["only"]["items"] == [{"value": 4}]

    status = json.loads(cli("status", result["run_id"], "--home", home).stdout)
    assert status["status"] == "succeeded"
    events = [json.loads(line) for line in cli("events", result["run_id"], "--home",
                                                home).stdout.splitlines()]
    assert events[0]["type"] == "run.submitted" and events[-1]["type"] == "run.succeeded"


def test_bad_spec_file_is_a_clear_error(tmp_path):
    spec = tmp_path / "bad.json"
    spec.write_text('{"kind": "graph", "nodes": [{"id": "x"}]}')
    proc = genloop("run", str(spec), "--home", str(tmp_path / "home"))
    assert proc.returncode == 2
    assert "cannot read" in proc.stderr and "op" in proc.stderr


def test_unknown_run_is_reported_not_raised(tmp_path):
    proc = genloop("status", "nope", "--home", str(tmp_path / "home"))
    assert proc.returncode == 1
    assert "no run 'nope'" in proc.stderr
