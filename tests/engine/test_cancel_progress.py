"""Progress arrives in order, and a cancelled request stops within two denoising steps."""

from __future__ import annotations

import threading

import pytest

from genloop.sdk.errors import Cancelled
from genloop.workers.engine.generate import ImageSettings

SETTINGS = ImageSettings(steps=20, guidance=5.0, width=32, height=32, cache="off")


@pytest.fixture
def unet_calls(registry):
    calls = []
    with registry.acquire("tiny") as pipe:
        handle = pipe.unet.register_forward_hook(lambda *_: calls.append(1))
    yield calls
    handle.remove()


def test_progress_events_arrive_in_order_and_end_at_the_total(engine):
    events = []

    engine.generate("tiny", ["a cat", "a dog"], [1, 2], ImageSettings(
        steps=5, guidance=5.0, width=32, height=32), on_step=lambda d, t: events.append((d, t)))

    # two candidates in one batch: each step advances both
    assert events == [(2 * s, 10) for s in range(1, 6)]


def test_cancel_mid_run_stops_within_two_steps(engine, unet_calls):
    def on_step(done, total):
        if done >= 5:
            raise Cancelled("run was cancelled")

    with pytest.raises(Cancelled):
        engine.generate("tiny", ["a slow painting"], [0], SETTINGS, on_step=on_step)

    assert len(unet_calls) <= 5 + 2  # not the 20 steps asked for


def test_cancelling_one_request_leaves_the_others_in_its_batch_running(engine):
    results = {}

    def run(name, on_step):
        try:
            results[name] = engine.generate("tiny", [name], [3], SETTINGS, on_step=on_step)
        except Cancelled as exc:
            results[name] = exc

    def cancel_at_3(done, total):
        if done >= 3:
            raise Cancelled("cancelled")

    threads = [threading.Thread(target=run, args=("a cat", cancel_at_3)),
               threading.Thread(target=run, args=("a dog", None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    assert engine.batcher.batches == [2]
    assert isinstance(results["a cat"], Cancelled)
    assert len(results["a dog"]) == 1


def test_a_waiting_request_is_withdrawn_when_its_check_says_cancelled(engine):
    def check():
        raise Cancelled("cancelled while queued")

    # A long window keeps the job queued; the wait loop's check fires first.
    engine.batcher.window, window = 5.0, engine.batcher.window
    try:
        with pytest.raises(Cancelled):
            engine.generate("tiny", ["a cat"], [1], SETTINGS, check=check)
    finally:
        engine.batcher.window = window
    assert engine.batcher._pending == []
    assert engine.batcher.batches == []  # nothing ran
