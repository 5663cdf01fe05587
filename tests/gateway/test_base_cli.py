"""The base install's ``genloop`` (wheel only: pydantic, httpx, tenacity) against a live gateway.

Given a venv with nothing but the built wheel, when its CLI talks to a gateway with
``--gateway URL --api-key KEY``, then run, status, runs, events --follow, result, artifact get
and cancel and schema all work: the client-side commands need no extra.
"""

from __future__ import annotations

import json

import pytest
from wheel_util import run_in

from genloop.sdk import Graph

# Building the venvs dominates (see wheel_util); the first test to ask for one pays for it.
# One xdist worker builds the wheel and its venvs (session fixtures) for both files.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("wheel")]


def test_client_commands_over_a_gateway_from_the_base_install(stack, base_venv, tmp_path):
    _, key = stack.tenant()

    def genloop(*args: str) -> str:
        proc = run_in(base_venv, "genloop", *args, "--gateway", stack.url, cwd=tmp_path,
                      GENLOOP_API_KEY=key)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout

    g = Graph(labels={"from": "base-cli"})
    g.add("gw-image", params={"label": "base", "n": 2}, id="image")
    spec = tmp_path / "spec.json"
    spec.write_text(g.model_dump_json())

    loop = json.loads(genloop("schema", "--only", "loop"))
    assert loop["properties"]["model"]["enum"][-1] is None and "shapes" in loop["properties"][
        "model"]["enum"]

    run_id = json.loads(genloop("run", str(spec), "--no-wait"))["id"]
    events = [json.loads(line)["type"] for line in genloop("events", run_id, "--follow")
              .splitlines()]
    assert events[0] == "run.submitted" and events[-1] == "run.succeeded"
    assert json.loads(genloop("status", run_id))["status"] == "succeeded"
    images = json.loads(genloop("result", run_id, "--wait"))["outputs"]["image"]["items"]
    genloop("artifact", "get", images[1]["artifact"], "-o", str(tmp_path / "one"))
    assert (tmp_path / "one").read_bytes() == b"base:1"

    slow = Graph()
    slow.add("gw-wait", params={"sleep": 30}, id="wait")
    spec.write_text(slow.model_dump_json())
    slow_id = json.loads(genloop("run", str(spec), "--no-wait"))["id"]
    assert json.loads(genloop("cancel", slow_id))["id"] == slow_id
    ended = run_in(base_venv, "genloop", "result", slow_id, "--wait", "--timeout", "60",
                   "--gateway", stack.url, "--api-key", key, cwd=tmp_path)
    assert ended.returncode == 1, ended.stderr
    assert json.loads(ended.stdout)["status"] == "cancelled"
    # runs lists them newest first; --label finds the labelled one
    listed = [line.split()[:2] for line in genloop("runs").splitlines()]
    assert listed == [[slow_id, "cancelled"], [run_id, "succeeded"]]
    found = [json.loads(line) for line in genloop("runs", "--label", "from=base-cli",
                                                  "--json").splitlines()]
    assert [(r["id"], r["labels"]) for r in found] == [(run_id, {"from": "base-cli"})]
