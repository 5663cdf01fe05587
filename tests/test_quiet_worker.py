"""The embedded runtime's Dramatiq threads sleep while idle, yet stop and retry on time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from genloop_test_ops import executions

from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.backends.quiet_worker import IDLE_WAIT


def _wakeups(threads) -> int:
    """Voluntary context switches of these threads so far: each wait that ended is one."""
    total = 0
    for thread in threads:
        status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
        total += int(next(line.split()[1] for line in status.splitlines()
                          if line.startswith("voluntary_ctxt_switches")))
    return total


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts wake-ups from /proc")
def test_an_idle_runtime_s_threads_do_not_poll(runtime):
    worker = runtime.worker
    threads = [*worker.workers, *worker.consumers.values()]
    time.sleep(0.2)  # the threads are in their waits
    before = _wakeups(threads)
    time.sleep(1.0)
    # Dramatiq's own threads at a 50 ms timeout woke about 300 times a second here.
    assert _wakeups(threads) - before <= len(threads)


def test_closing_an_idle_runtime_does_not_wait_for_its_threads_timeouts(tmp_path):
    client = Client.local(home=tmp_path / "home", threads=4)
    time.sleep(0.2)
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started < IDLE_WAIT / 10


def test_a_delayed_retry_runs_at_its_eta_not_at_an_idle_timeout(client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="flaky", params={"log": log, "fail_times": 1}, max_retries=1,
          min_backoff=0.3, max_backoff=0.3)

    started = time.monotonic()
    result = client.submit(g).wait(timeout=30)

    assert result.status == RunStatus.SUCCEEDED and executions(log) == 2
    assert time.monotonic() - started < IDLE_WAIT / 4
