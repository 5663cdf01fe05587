"""Kill the embedded process mid-run with SIGKILL; ``resume``, or the home opened again, finishes
the run from the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from genloop_test_ops import executions

from genloop.sdk import Client, RunStatus

CHAIN = 6

SUBMITTER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import genloop_test_ops
    from genloop.sdk import Client, Graph

    client = Client.local(home={home!r}, lease_ttl=1.0)
    g = Graph()
    prev = []
    for i in range({chain}):
        prev = [g.add("test-count", id=f"n{{i}}", inputs=prev,
                      params={{"log": {log!r}, "value": i, "sleep": 0.4}})]
    run = client.submit(g)
    print(run.id, flush=True)
    time.sleep(600)
""")


def _killed_mid_run(home: Path, log: Path) -> tuple[str, int]:
    """A chain run submitted by a process SIGKILLed after three of its nodes ran: its id, and
    how many nodes had run."""
    script = SUBMITTER.format(tests=str(Path(__file__).parent), home=str(home), log=str(log),
                              chain=CHAIN)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    deadline = time.monotonic() + 60
    while executions(str(log)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = executions(str(log))
    assert 3 <= done_before < CHAIN, "the kill should land mid-run"
    return run_id, done_before


@pytest.mark.slow
@pytest.mark.parametrize("resume", [True, False], ids=["resume", "reopened"])
def test_sigkill_mid_run_then_resume_reuses_stored_results(tmp_path, resources, resume):
    """Resumed, or only with its home opened again: a run stranded ``running`` by a crash would
    otherwise hold one of its tenant's concurrent runs until someone resumed it. Reopened, the
    sweeper finds its work abandoned (the dead process's lease, its lost messages)."""
    home, log = tmp_path / "home", tmp_path / "log"
    run_id, done_before = _killed_mid_run(home, log)

    with Client.local(home=home, resources=resources, lease_ttl=1.0, sweep_every=0.5) as client:
        assert client.get(run_id).status().status == RunStatus.RUNNING
        run = client.resume(run_id) if resume else client.get(run_id)
        result = run.wait(timeout=60)

    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs[f"n{CHAIN - 1}"].items == [{"value": sum(range(CHAIN))}]
    counts = [executions(str(log), f"n{i}:{i}") for i in range(CHAIN)]
    # Nodes that finished before the kill ran once; at most the one running then ran twice.
    assert all(c >= 1 for c in counts) and sum(counts) <= CHAIN + 1
    assert counts[: done_before - 1] == [1] * (done_before - 1)
