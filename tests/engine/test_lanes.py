"""Priority lanes: the engine builds its batches around interactive requests first, gives batch
work its share (1 batch in BATCH_TURN while both wait), keeps each batch to one lane, cuts
batch-lane batches while interactive work is recent; an agent's loop overtakes a campaign's
backlog."""

from __future__ import annotations

import threading

from lanes_util import check_loop_overtakes_backlog

from genloop.workers.engine.batching import BATCH_SPLIT, Batcher, Job
from genloop.workers.runtime.batch_queue import BATCH_TURN

KEY = ("m", 8, 8)


class _Recorder:
    """run_batch for a Batcher: holds the first batch until released, logs each batch's lanes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lanes: list[list[str]] = []

    def __call__(self, key, slots) -> None:
        if not self.lanes:
            self.lanes.append(["hold"])
            self.release.wait(10)
        else:
            self.lanes.append([s.job.priority for s in slots])
        for slot in slots:
            slot.job.deliver(slot.index, None)


def _job(n: int, priority: str, seed: int = 0) -> Job:
    return Job(KEY, ["p"] * n, [seed + i for i in range(n)], [None] * n, 1, priority=priority)


def _queue_behind_a_running_batch(batcher: Batcher, recorder: _Recorder,
                                  jobs: list[Job], first_lane: str = "interactive") -> None:
    first = batcher.submit(_job(1, first_lane, seed=999))
    while not recorder.lanes:  # the held batch is running: everything below queues
        threading.Event().wait(0.005)
    for job in jobs:
        batcher.submit(job)
    recorder.release.set()
    for job in [first, *jobs]:
        job.future.result(10)


def test_interactive_requests_overtake_queued_batch_work():
    # Given ten batch requests queued before two interactive ones
    recorder = _Recorder()
    batcher = Batcher(recorder, window=0.0, max_batch=8)
    try:
        jobs = [_job(8, "batch", seed=10 * i) for i in range(10)]
        jobs += [_job(8, "interactive", seed=500 + 10 * i) for i in range(2)]
        _queue_behind_a_running_batch(batcher, recorder, jobs)
    finally:
        batcher.close()
    # Then the interactive ones ran first, and every batch request still ran (in smaller
    # batches: interactive work is recent)
    lanes = recorder.lanes[1:]
    assert lanes[:2] == [["interactive"] * 8] * 2
    assert lanes[2:] == [["batch"] * (8 // BATCH_SPLIT)] * (10 * BATCH_SPLIT)


def test_batch_work_keeps_its_turn_while_interactive_work_keeps_coming():
    # Given more interactive work queued than batch work, both waiting
    recorder = _Recorder()
    batcher = Batcher(recorder, window=0.0, max_batch=8)
    try:
        jobs = [_job(8, "batch", seed=10 * i) for i in range(4)]
        jobs += [_job(8, "interactive", seed=500 + 10 * i) for i in range(9)]
        _queue_behind_a_running_batch(batcher, recorder, jobs)
    finally:
        batcher.close()
    # Then every BATCH_TURN-th batch is batch work until the interactive work runs out
    heads = [lane[0] for lane in recorder.lanes[1:]]
    turn = ["interactive"] * (BATCH_TURN - 1) + ["batch"]
    assert heads == turn * 3 + ["batch"] * (4 * BATCH_SPLIT - 3)


def test_a_batch_holds_one_lane_so_batch_work_does_not_slow_an_interactive_batch():
    # Given batch work of the same settings queued beside a small interactive request
    recorder = _Recorder()
    batcher = Batcher(recorder, window=0.0, max_batch=8)
    try:
        _queue_behind_a_running_batch(
            batcher, recorder, [_job(8, "batch"), _job(3, "interactive", seed=50)])
    finally:
        batcher.close()
    # Then the interactive request ran alone (on a CPU a batch's time grows with its size)
    assert recorder.lanes[1:] == [["interactive"] * 3] + [["batch"] * (8 // BATCH_SPLIT)] * (
        BATCH_SPLIT)


def test_batch_work_runs_full_batches_unless_interactive_work_came_lately():
    # Given batch work alone, then an interactive request and more batch work
    recorder = _Recorder()
    batcher = Batcher(recorder, window=0.0, max_batch=8)
    try:
        _queue_behind_a_running_batch(batcher, recorder, [_job(8, "batch"), _job(8, "batch")],
                                      first_lane="batch")
        assert recorder.lanes[1:] == [["batch"] * 8] * 2  # full batches
        recorder.lanes.clear()
        recorder.release.clear()
        _queue_behind_a_running_batch(batcher, recorder, [_job(8, "batch"), _job(1, "interactive")],
                                      first_lane="batch")
    finally:
        batcher.close()
    # Then the batch work after it ran in a BATCH_SPLIT-th of the cap: an interactive round
    # arriving next waits for a batch that much shorter
    assert recorder.lanes[1:] == [["interactive"]] + [["batch"] * (8 // BATCH_SPLIT)] * (
        BATCH_SPLIT)


def test_an_agents_loop_finishes_before_a_campaign_backlog_queued_ahead_of_it(client):
    check_loop_overtakes_backlog(client)
