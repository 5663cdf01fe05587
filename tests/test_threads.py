"""A worker process's torch threads fit its cores (genloop.workers.models.threads)."""

from __future__ import annotations

import threading

import pytest

from genloop.workers.models.threads import (
    SCORER_THREADS,
    available_cores,
    engine_threads,
    fit_torch_threads,
)


@pytest.fixture
def torch_default():
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_the_engine_takes_every_core_and_the_scorer_one_unless_pinned(monkeypatch,
                                                                     torch_default):
    from genloop.workers.models.resources import Resources

    monkeypatch.setenv("GENLOOP_TORCH_THREADS", "")
    res = Resources(device="cpu")
    res.models  # noqa: B018  (first use fits the threads)
    assert res.models.batch_threads == engine_threads() == available_cores()
    assert res.scoring.torch_threads == SCORER_THREADS == 1
    # Every other thread's torch work runs on one thread: no OpenMP team beside the engine's
    assert torch_default.get_num_threads() == 1

    pinned = Resources(device="cpu", torch_threads=2)
    assert pinned.models.batch_threads is None and pinned.scoring.torch_threads is None
    assert torch_default.get_num_threads() == 2


def test_a_batch_thread_runs_torch_with_its_own_thread_count(torch_default):
    from genloop.workers.engine.batching import Batcher, Job

    seen: list[int] = []
    done = threading.Event()

    def run_batch(key, slots) -> None:
        seen.append(torch_default.get_num_threads())
        for slot in slots:
            slot.job.future.set_result(None)
        done.set()

    torch_default.set_num_threads(1)
    batcher = Batcher(run_batch, window=0.0)
    batcher.torch_threads = 2
    try:
        batcher.submit(Job(key=("m", 8, 8), prompts=["p"], seeds=[0], negative_prompts=[None],
                           steps=1))
        assert done.wait(10)
    finally:
        batcher.close()
    # Then the serving thread ran at its own count, while this thread kept the process's
    assert seen == [2] and torch_default.get_num_threads() == 1


def test_an_explicit_setting_wins_and_zero_leaves_torch_alone(monkeypatch, torch_default):
    monkeypatch.setenv("GENLOOP_TORCH_THREADS", "1")
    assert fit_torch_threads() == 1 == torch_default.get_num_threads()
    assert fit_torch_threads(2) == 2 == torch_default.get_num_threads()
    monkeypatch.setenv("GENLOOP_TORCH_THREADS", "0")
    torch_default.set_num_threads(3)
    assert fit_torch_threads() is None and torch_default.get_num_threads() == 3
    with pytest.raises(ValueError):
        fit_torch_threads(-1)
