"""Embedded runs through the recovery paths: a crash between commit and enqueue, and a second
run waiting on the lease of identical work."""

from __future__ import annotations

import logging

import pytest
from genloop_test_ops import executions

from genloop.sdk import Client, Graph, RunStatus

logger = logging.getLogger(__name__)


def test_a_crash_between_commit_and_enqueue_is_recovered_by_the_sweeper(tmp_path, resources):
    log = str(tmp_path / "log")
    g = Graph()
    a = g.add("test-count", id="a", params={"log": log, "value": 1})
    g.add("test-count", id="b", inputs=[a], params={"log": log, "value": 2})
    # A long lease keeps the grace-period recovery out of it: only the outbox can save b.
    with Client.local(home=tmp_path / "home", resources=resources, lease_ttl=60.0,
                      sweep_every=0.2) as client:
        scheduler = client.backend.runtime.scheduler
        real, lost = scheduler.enqueue, []

        def crash_once(instances, delay=0.0):
            if not lost and any(i.node_id == "b" for i in instances):
                lost.append(instances)
                raise RuntimeError("worker died after commit, before enqueue")
            real(instances, delay)

        scheduler.enqueue = crash_once
        result = client.submit(g).wait(timeout=20)

    assert lost, "the crash was not simulated"
    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["b"].items == [{"value": 3}]
    assert executions(log) == 2


@pytest.mark.slow
def test_an_identical_concurrent_run_finishes_right_after_the_first(tmp_path, resources):
    """The second run finds the key leased and polls; with a 60 s lease it used to wait the
    whole lease out before reusing a result that took 2 s to make."""
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="a", params={"log": log, "value": 7, "sleep": 2.0})
    with Client.local(home=tmp_path / "home", resources=resources, lease_ttl=60.0) as client:
        first, second = client.submit(g), client.submit(g)
        results = [first.wait(timeout=90), second.wait(timeout=90)]
        store = client.backend.runtime.store
        gap = abs(store.get_run(second.id).finished_at - store.get_run(first.id).finished_at)
        logger.info("second_run_finished_after_first_s=%.2f", gap)

    assert [r.status for r in results] == [RunStatus.SUCCEEDED] * 2
    assert executions(log) == 1
    assert gap < 10.0, f"the second run finished {gap:.1f}s after the first"


def test_a_run_waiting_on_a_leased_key_is_not_resent_as_lost(tmp_path, resources, caplog):
    """A delivery that finds its key leased looks again every LEASE_POLL_CAP, between looks
    in the worker's delay heap where no backlog counts it; it used to look lost to the
    sweeper after the grace period, which re-sent it again and again while the holder ran
    (32 loops sharing one prompt: thousands of extra deliveries)."""
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="a", params={"log": log, "value": 7, "sleep": 4.0})
    caplog.set_level(logging.WARNING, logger="genloop.workers.runtime.recovery")
    # A short lease (renewed while the holder runs) makes the grace period short too.
    with Client.local(home=tmp_path / "home", resources=resources, lease_ttl=1.0,
                      sweep_every=0.1) as client:
        first, second = client.submit(g), client.submit(g)
        results = [first.wait(timeout=60), second.wait(timeout=60)]

    assert [r.status for r in results] == [RunStatus.SUCCEEDED] * 2
    assert executions(log) == 1
    resent = [r.getMessage() for r in caplog.records if "re-sending" in r.getMessage()]
    assert not resent, resent
