"""The sweeper tells a message that waits in this process from one that is lost: a queued
instance whose message sits in a worker's prefetch (its threads busy) or waits its turn in the
fair queue is left alone, however long it waits; one whose message is gone is re-sent."""

from __future__ import annotations

import logging

import pytest
from genloop_test_ops import executions
from wait_util import until

from genloop.sdk import Client, Graph, NodeStatus, RunStatus
from genloop.workers.metrics.prometheus import metrics
from genloop.workers.runtime.recovery import recover


def _lost() -> float:
    return metrics().sweeper_resends.labels("message_lost")._value.get()


@pytest.mark.parametrize("fair_window", [None, 1])
def test_a_queued_instance_held_by_busy_threads_is_not_resent(tmp_path, resources, caplog,
                                                              fair_window):
    # Given one worker thread busy for 3 s, well past the sweeper's grace (the lease, 1 s),
    # and two more roots queued behind it: in the worker's prefetch, or in the fair queue
    log = str(tmp_path / "log")
    g = Graph()
    for i, sleep in enumerate((3.0, 0.0, 0.0)):
        g.add("test-count", id=f"n{i}", params={"log": log, "value": i, "sleep": sleep})
    caplog.set_level(logging.WARNING, logger="genloop.workers.runtime.recovery")
    before = _lost()
    with Client.local(home=tmp_path / "home", resources=resources, threads=1, lease_ttl=1.0,
                      sweep_every=0.1, fair_window=fair_window) as client:
        # When the run goes through, the sweeper looking every 0.1 s
        result = client.submit(g).wait(timeout=60)

    # Then nothing was re-sent: each node ran once
    assert result.status == RunStatus.SUCCEEDED
    assert executions(log) == 3
    resent = [r.getMessage() for r in caplog.records if "re-sending" in r.getMessage()]
    assert not resent, resent
    assert _lost() == before


def test_a_lost_message_is_still_resent_after_the_grace(tmp_path, resources):
    # Given a runtime with no worker thread, and a run whose root message was then lost
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="a", params={"log": log, "value": 1})
    with Client.local(home=tmp_path / "home", resources=resources, threads=0) as client:
        runtime = client.backend.runtime
        run = client.submit(g)
        stale = lambda: runtime.store.stale_instances(older_than=0.2)  # noqa: E731
        # While its message waits in the broker, the instance is not lost, though untouched
        # for longer than the grace
        until(stale, "the instance untouched for the 0.2 s grace")
        assert recover(runtime.scheduler, grace=0.2) == 0
        runtime.broker.flush("cpu")
        (inst,) = runtime.store.instances(run.id)
        assert inst.status == NodeStatus.QUEUED
        before = _lost()
        # When the grace passes with nothing holding it
        until(stale, "the instance untouched for the 0.2 s grace again")
        # Then the sweeper sends it again, once
        assert recover(runtime.scheduler, grace=0.2) == 1
        assert runtime.broker.queues["cpu"].qsize() == 1
        assert _lost() == before + 1
