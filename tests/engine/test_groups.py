"""Batch formation: a job group (a loop round, a node's shards) reaches the model as one call,
a full batch never waits, and a job whose check fails at formation leaves its batch alone.

These drive the :class:`Batcher` with a stand-in ``run_batch`` (no model), so the batch log is
exact and the tests are fast.
"""

from __future__ import annotations

import threading

import pytest

from genloop.sdk.errors import Cancelled
from genloop.workers.engine.batching import Batcher, Job

KEY = ("tiny", 32, 32, 4, 5.0, "off")


def _job(i: int, group=None, size: int = 1, check=None) -> Job:
    return Job(KEY, [f"p{i}"], [i], [None], 4, group=group, group_size=size, check=check)


@pytest.fixture
def batcher():
    def run_batch(key, slots):
        for s in slots:
            s.job.deliver(s.index, f"image {s.prompt}")

    b = Batcher(run_batch, window=0.0, max_batch=8, group_wait=30.0)
    yield b
    b.close()


def test_a_group_waits_for_its_members_past_the_window(batcher):
    # Given a group of three jobs whose members arrive one by one, with no batching window
    gate = threading.Event()
    members = [_job(i, group=("run", "round-2/generate"), size=3) for i in range(3)]

    # When the first arrives, and the others only after it has had every chance to run alone
    batcher.submit(members[0])
    assert not gate.wait(0.3)
    batcher.submit(members[1])
    batcher.submit(members[2])

    # Then the three ran as one batch
    assert [m.future.result(10) for m in members] == [["image p0"], ["image p1"], ["image p2"]]
    assert batcher.batches == [3]
    assert batcher.groups == [{("run", "round-2/generate"): 3}]


def test_a_full_batch_does_not_wait_for_an_incomplete_group(batcher):
    # Given a group of 20 of which 8 have arrived (the cap)
    members = [_job(i, group="big", size=20) for i in range(8)]
    for m in members:
        batcher.submit(m)

    # Then those 8 run at once, without the group's 30 s wait
    for m in members:
        m.future.result(10)
    assert batcher.batches == [8]


def test_jobs_of_many_groups_fill_batches_to_the_cap(batcher):
    # Given 32 one-image jobs from 4 groups of 8 (four loop rounds in flight)
    jobs = [_job(i, group=i // 8, size=8) for i in range(32)]
    for j in jobs:
        batcher.submit(j)

    for j in jobs:
        j.future.result(10)
    assert batcher.batches == [8, 8, 8, 8]


def test_a_job_whose_check_fails_at_formation_fails_alone(batcher):
    # Given a group of two in which one job's run was cancelled while it waited
    def cancelled():
        raise Cancelled("run was cancelled")

    gone = _job(0, group="g", size=2, check=cancelled)
    kept = _job(1, group="g", size=2, check=lambda: None)

    batcher.submit(gone)
    batcher.submit(kept)

    # Then the other still runs, in a batch of one
    assert kept.future.result(10) == ["image p1"]
    with pytest.raises(Cancelled):
        gone.future.result(10)
    assert batcher.batches == [1]


def test_an_incomplete_group_does_not_idle_the_device_while_other_work_waits():
    # Given a batcher whose first batch (a plug) runs until released, with a 30 s group wait
    plug_running, release = threading.Event(), threading.Event()

    def run_batch(key, slots):
        if slots[0].prompt == "plug":
            plug_running.set()
            release.wait(10)
        for s in slots:
            s.job.deliver(s.index, f"image {s.prompt}")

    batcher = Batcher(run_batch, window=0.0, max_batch=8, group_wait=30.0)
    try:
        plug = Job(KEY, ["plug"], [0], [None], 4)
        batcher.submit(plug)
        assert plug_running.wait(10)
        # and, queued behind it, a campaign's job and one of a loop round's two instances
        # (the other went to another worker)
        campaign = Job(KEY, ["c"], [1], [None], 4, priority="batch")
        half = _job(2, group=("run", "round-1/generate"), size=2)
        batcher.submit(campaign)
        batcher.submit(half)
        # When the plug ends
        release.set()
        # Then the round's half runs at once, ahead of the campaign, and the campaign after it
        assert half.future.result(5) == ["image p2"]
        assert campaign.future.result(5) == ["image c"]
        assert batcher.batches == [1, 1, 1]
        assert batcher.groups[1:] == [{("run", "round-1/generate"): 1}, {None: 1}]
    finally:
        batcher.close()
