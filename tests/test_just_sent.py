"""The instances a process just enqueued, kept for its own worker threads (JustSent): the
newest are kept, each is given once, and a process that runs nothing keeps none."""

from __future__ import annotations

from genloop.workers.runtime.scheduler import JustSent
from genloop.workers.stores.records import InstanceRecord


def _inst(instance_id: str) -> InstanceRecord:
    return InstanceRecord(run_id="r", instance_id=instance_id, node_id="n", seq=0)


def test_the_newest_are_kept_and_each_is_given_once():
    a, b, c = (_inst(i) for i in "abc")
    kept = JustSent(size=2)
    kept.add([a, b])
    kept.add([c])
    assert kept.take("r", "a") is None  # the oldest went to make room
    assert kept.take("r", "b") is b and kept.take("r", "c") is c
    assert kept.take("r", "b") is None  # a redelivery reads the store


def test_a_process_that_runs_nothing_keeps_nothing():
    kept = JustSent(size=0)
    kept.add([_inst("a")])
    assert kept.take("r", "a") is None
