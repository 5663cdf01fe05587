"""Cross-request batching: concurrent requests share a call, and each candidate is the image
it would be alone."""

from __future__ import annotations

import time

from engine_helpers import concurrently, psnr, reference

from genloop.sdk import Graph, RunStatus
from genloop.workers.engine.generate import ImageSettings

SETTINGS = ImageSettings(steps=4, guidance=5.0, width=32, height=32, cache="off")


def test_concurrent_requests_are_merged_and_match_their_unbatched_images(registry, engine):
    # Given four requests of two candidates each, submitted at once from four threads
    jobs = [([f"a red sneaker, take {k}", f"a blue hat, take {k}"], [2 * k, 2 * k + 1])
            for k in range(4)]

    # When the engine runs them
    out = concurrently(lambda p, s: engine.generate("tiny", p, s, SETTINGS), jobs)

    # Then they ran as one batch of 8, and every candidate matches its one-call-each image
    assert engine.batcher.batches == [8]
    prompts = [p for ps, _ in jobs for p in ps]
    seeds = [s for _, ss in jobs for s in ss]
    ref = reference(registry, prompts, seeds, SETTINGS)
    got = [im for images in out for im in images]
    assert min(psnr(a, b) for a, b in zip(got, ref, strict=True)) >= 40.0
    assert len({im.tobytes() for im in got}) == 8  # eight different images


def test_requests_with_different_settings_are_not_merged(engine):
    other = ImageSettings(steps=3, guidance=5.0, width=32, height=32, cache="off")

    concurrently(lambda s: engine.generate("tiny", ["a cat"], [1], s), [(SETTINGS,), (other,)])

    assert sorted(engine.batcher.batches) == [1, 1]


def test_a_request_larger_than_max_batch_is_spread_over_batches(registry, engine):
    prompts, seeds = [f"a dog {i}" for i in range(10)], list(range(10))

    images = engine.generate("tiny", prompts, seeds, SETTINGS)

    assert engine.batcher.batches == [8, 2]
    ref = reference(registry, prompts, seeds, SETTINGS)
    assert min(psnr(a, b) for a, b in zip(images, ref, strict=True)) >= 40.0


def test_the_engine_reports_the_last_batch_s_cap_not_its_size(engine):
    # (a pool worker keeps about a cap's worth waiting behind its running batch: pool/routing)
    engine.generate("tiny", ["a cat", "a dog"], [0, 1], SETTINGS)

    assert engine.batcher.batches == [2]
    assert engine.load() == {"running": None, "queued": {}, "batch_limit": 8}


def test_shards_of_one_run_are_batched_by_the_worker(client, resources):
    # Given a node of 8 candidates in shards of 2, run by 4 worker threads
    g = Graph()
    node = g.generate("a red sneaker", model="tiny", n=8, seed=3, shard_size=2)
    batches = resources.models.engine.batcher.batches
    before = len(batches)

    result = client.submit(g).wait(timeout=120)

    # Then the shards shared pipeline calls
    assert result.status == RunStatus.SUCCEEDED
    assert [c.seed for c in result.items(node)] == list(range(3, 11))
    assert max(batches[before:]) > 2


def test_the_default_cap_batches_small_images_by_32_on_cpu_and_larger_ones_by_8():
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.registry import ModelRegistry

    # Given an engine with no configured cap
    registry = ModelRegistry("cpu", engine_options=EngineOptions(window=0.0))
    engine = registry.engine
    small = ImageSettings(steps=1, guidance=5.0, width=32, height=32, cache="off")
    large = ImageSettings(steps=1, guidance=5.0, width=96, height=96, cache="off")
    batches = engine.batcher.batches
    try:
        # When 40 small images and then 10 larger ones are asked for in one request each
        engine.generate("tiny", [f"a dog {i}" for i in range(40)], list(range(40)), small)
        engine.generate("tiny", [f"a cat {i}" for i in range(10)], list(range(10)), large)
    finally:
        engine.close()

    # Then small images (at most 64x64) ran 32 to a call, larger ones 8
    assert batches == [32, 8, 8, 2]
    assert engine.max_batch(64, 64) == 32 and engine.max_batch(65, 64) == 8


def test_a_batch_whose_groups_have_all_arrived_does_not_wait_out_the_window():
    from genloop.workers.engine.batching import Batcher, Job

    ran: list[float] = []

    def run_batch(key, slots) -> None:
        ran.append(time.monotonic())
        for slot in slots:
            slot.job.deliver(slot.index, None)

    batcher = Batcher(run_batch, window=2.0, group_wait=2.0)
    try:
        # Given a round of one loop: a group of two jobs, both arrived
        started = time.monotonic()
        jobs = [Job(("m", 8, 8), ["p"], [i], [None], 1, group=("run", "round-2"), group_size=2)
                for i in range(2)]
        for job in jobs:
            batcher.submit(job)
        for job in jobs:
            job.future.result(10)
        # Then their batch ran at once, not after the 2 s window
        assert len(ran) == 1 and ran[0] - started < 1.0
        # While a request of no group still waits the window for others to join it
        started = time.monotonic()
        batcher.submit(Job(("m", 8, 8), ["p"], [9], [None], 1)).future.result(10)
        assert ran[1] - started >= 1.9
    finally:
        batcher.close()
