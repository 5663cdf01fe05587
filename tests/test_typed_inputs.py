"""An op gets its inputs as the producing op's declared output model, whichever op modules the
process that runs it imported (each case in a fresh interpreter, so the import order is ours)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two fresh interpreters, each importing torch: 13 s of CPU

TESTS = Path(__file__).resolve().parent

_RUN = """
import json, sys
from genloop.sdk import Client, Graph
from genloop.workers import OpRegistry, OpSpec, default_registry

home, tag, with_producer = sys.argv[1], sys.argv[2], sys.argv[3] == "yes"
if with_producer:
    import typed_ops.producer  # registers typed-make
import typed_ops.consumer  # registers typed-check; never imports the producer

registry = OpRegistry()
for spec in default_registry.values():
    registry.register(spec)
if not with_producer:
    # What a worker without the producer's module knows of it: a name to plan with (the way a
    # client's catalogue stand-in does), no code and no output model.
    def remote(params, inputs, ctx):
        raise RuntimeError("typed-make is not run here")
    registry.register(OpSpec(name="typed-make", fn=remote))

g = Graph()
made = g.add("typed-make", id="make")
g.add("typed-check", inputs=[made], params={"tag": tag}, id="check")
with Client.local(home, threads=2, registry=registry) as client:
    result = client.submit(g).wait(timeout=60)
print(json.dumps({"status": result.status, "seen": result.items("check"),
                  "producer_imported": "typed_ops.producer" in sys.modules}))
"""


def _run(home: Path, tag: str, with_producer: bool) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(home), tag, "yes" if with_producer else "no"],
        capture_output=True, text=True, timeout=120, cwd=TESTS,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_op_gets_typed_inputs_whichever_op_modules_its_process_imported(tmp_path):
    # Given the producer's result stored by a process that imported both op modules
    first = _run(tmp_path, "first", with_producer=True)
    assert first["status"] == "succeeded"
    assert first["seen"] == [{"type": "typed_ops.producer.Made"}] * 2
    # When a process that imported only the consumer runs it on that stored result
    second = _run(tmp_path, "second", with_producer=False)
    # Then the consumer still got the producer's declared model, not raw dicts
    assert second["status"] == "succeeded"
    assert second["seen"] == [{"type": "typed_ops.producer.Made"}] * 2
    assert second["producer_imported"]
