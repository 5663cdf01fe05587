"""Out of memory: the batch is split and retried, every candidate comes back, and the engine
remembers the largest batch that fit for that model and size."""

from __future__ import annotations

import weakref

import pytest
import torch
from engine_helpers import psnr, reference

from genloop.sdk.errors import Transient
from genloop.workers.engine.generate import ImageSettings
from genloop.workers.engine.oom import CudaContextLost, OomGuard, SimulatedOutOfMemory

SETTINGS = ImageSettings(steps=3, guidance=5.0, width=32, height=32, cache="off")


def test_a_simulated_oom_splits_the_batch_and_returns_every_candidate(registry, engine):
    # Given a device on which batches above 2 candidates run out of memory
    tried = []

    def inject(key, size):
        tried.append(size)
        return size > 2

    engine.oom.inject = inject
    prompts, seeds = [f"a kite {i}" for i in range(6)], list(range(10, 16))
    progress = []

    # When six candidates are asked for in one request
    images = engine.generate("tiny", prompts, seeds, SETTINGS,
                             on_step=lambda done, total: progress.append((done, total)))

    # Then the batch of 6 was split (6 -> 3 + 3 -> 1 + 2 + 1 + 2) and all six came back
    assert tried == [6, 3, 1, 2, 3, 1, 2]
    assert len(images) == 6
    ref = reference(registry, prompts, seeds, SETTINGS)
    assert min(psnr(a, b) for a, b in zip(images, ref, strict=True)) >= 40.0
    # progress never went backwards across the retries and ended at the total
    assert [d for d, _ in progress] == sorted({d for d, _ in progress})
    assert progress[-1] == (18, 18)
    # and the next request of that shape is capped to what fit
    assert engine.oom.limit(("tiny", 32, 32)) == 2
    tried.clear()
    engine.generate("tiny", prompts[:4], seeds[:4], SETTINGS)
    assert tried == [2, 2]
    engine.oom.inject = None


def test_a_single_candidate_that_does_not_fit_fails_its_request(engine):
    engine.oom.inject = lambda key, size: key == ("tiny", 40, 40)
    settings = ImageSettings(steps=2, guidance=5.0, width=40, height=40, cache="off")
    job = engine.submit("tiny", ["a boat"], [1], settings)
    with pytest.raises(SimulatedOutOfMemory):
        job.future.result(timeout=60)


def test_the_guard_learns_the_largest_batch_that_fit():
    guard, key = OomGuard(), ("m", 64, 64)
    guard.record_fit(key, 16)
    assert guard.limit(key) is None  # no OOM yet: no cap

    guard.record_oom(key, 12)  # memory got tighter than when 16 fit
    assert guard.limit(key) == 6
    guard.record_fit(key, 6)
    guard.record_fit(key, 8)
    guard.record_fit(key, 13)  # above the OOM size: not trusted
    assert guard.limit(key) == 8


def test_the_failed_attempt_is_released_before_the_halves_run():
    # Given a fake allocator: each attempt holds an activation; batches above 1 run out
    activations: list = []
    alive_while_running: list[int] = []

    class Activation:
        pass

    def run(chunk):
        alive_while_running.append(sum(ref() is not None for ref in activations))
        held = Activation()
        activations.append(weakref.ref(held))
        if len(chunk) > 1:
            raise torch.OutOfMemoryError("fake: out of memory")
        return list(chunk)

    # When four candidates are split down to one each
    assert OomGuard().run_split(("m", 8, 8), [1, 2, 3, 4], run) == [1, 2, 3, 4]
    # Then no attempt ever ran while a failed one's activations were still alive
    assert alive_while_running == [0] * 7


def test_a_lost_cuda_context_fails_the_batch_as_transient_and_ends_the_process():
    guard = OomGuard()
    ended = []
    guard.on_context_lost = ended.append

    def run(chunk):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    # When a batch hits a sticky CUDA error
    with pytest.raises(CudaContextLost) as info:
        guard.run_split(("m", 8, 8), [1, 2, 3, 4], run)
    # Then it is not retried as halves, the error is Transient (the work is re-sent) and the
    # process is asked to end
    assert isinstance(info.value, Transient)
    assert len(ended) == 1 and guard.limit(("m", 8, 8)) is None
