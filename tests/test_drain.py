"""A draining worker hands its waiting work back (workers/middleware/drain.py): what its batched
resources have not started is withdrawn at once, what is unfinished at the end of the grace is
re-sent at the same attempt, and a late completion of work given up is dropped. The whole path
through real worker processes and SIGTERM: tests/redis_pool/test_pool_drain.py."""

from __future__ import annotations

import threading
import time

import pytest
from genloop_test_ops import executions

from genloop.sdk import Graph, RunStatus
from genloop.workers.engine.batching import Batcher, Job
from genloop.workers.runtime.batch_queue import HandedBack, hand_back_all

KEY = ("m", 8, 8, 1, 1.0, "off", "text", 1.0)


class _HeldFirst:
    """run_batch for a Batcher: holds the first batch until released; delivers every image."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches: list[list[tuple[int, int]]] = []

    def __call__(self, key, slots) -> None:
        self.batches.append([(s.job.seeds[0], s.index) for s in slots])
        if len(self.batches) == 1:
            self.release.wait(10)
        for slot in slots:
            slot.job.deliver(slot.index, f"image {slot.seed}")


def _job(n: int, seed: int) -> Job:
    return Job(KEY, ["p"] * n, [seed + i for i in range(n)], [None] * n, 1)


def test_hand_back_withdraws_what_has_not_started_and_leaves_a_started_request_to_finish():
    # Given a request of 6 whose first 4 candidates are in the running batch, two queued behind
    run_batch = _HeldFirst()
    batcher = Batcher(run_batch, window=0.0, max_batch=4)
    try:
        started = batcher.submit(_job(6, seed=0))
        while not run_batch.batches:
            time.sleep(0.005)
        queued = [batcher.submit(_job(2, seed=100)), batcher.submit(_job(1, seed=200))]
        # When the process hands its waiting work back
        assert hand_back_all() == 2
        run_batch.release.set()
        # Then the queued requests failed as handed back, and the started one ran to its end
        for job in queued:
            with pytest.raises(HandedBack):
                job.future.result(10)
        assert started.future.result(10) == [f"image {i}" for i in range(6)]
    finally:
        batcher.close()
    assert [len(b) for b in run_batch.batches] == [4, 2]
    assert {seed for b in run_batch.batches for seed, _ in b} == {0}


def test_deferred_work_unfinished_at_the_end_of_the_grace_runs_again_once_at_the_same_attempt(
        client, tmp_path):
    # Given an instance whose work finishes a second after its op returned
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-deferred-slow", id="slow", params={"log": log, "value": 7, "sleep": 1.0})
    run = client.submit(g)
    executor = client.backend.runtime.wiring.executor
    deadline = time.monotonic() + 30
    # (in flight here once its op returned: the body's log line comes a moment before that)
    while not executor.deferred:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # When the worker drains with a grace too short for it
    handed_back = executor.drain(0.1)
    result = run.wait(timeout=30)
    time.sleep(0.3)  # past the first body's own completion, which must be dropped
    # Then it was re-sent and ran again, and its output was made once, with no retry spent
    assert handed_back == 1
    assert result.status == RunStatus.SUCCEEDED, result.failures
    assert result.outputs["slow"].items == [{"value": 7}]
    assert executions(log, "slow:body") == 2
    assert executions(log, "slow:done") == 1
    events = list(run.events(follow=False))
    assert [e.attempt for e in events if e.type == "instance.started"] == [1, 1]
    assert not [e for e in events if e.type == "instance.retry"]
