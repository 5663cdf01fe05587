"""The engine's metrics: a batch's size and images, and the UNet calls DeepCache answered."""

from __future__ import annotations

from genloop.workers.engine.generate import ImageSettings
from genloop.workers.metrics.prometheus import metrics


def sample(metric, suffix: str, **labels: str) -> float:
    return sum(s.value for family in metric.collect() for s in family.samples
               if s.name.endswith(suffix) and all(s.labels.get(k) == v for k, v in labels.items()))


def snapshot(m) -> tuple[float, ...]:
    """Batches and their images, images generated, UNet calls skipped."""
    return (sample(m.batch_size, "_count", kind="text"),
            sample(m.batch_size, "_sum", kind="text"),
            sample(m.images, "_total"), sample(m.step_cache_skips, "_total"))


def test_one_batch_of_three_with_deepcache_moves_the_engine_metrics(resources):
    m = metrics()
    before = snapshot(m)

    # 12 steps, DeepCache interval 2: 4 of the 12 UNet calls are answered from kept features
    images = resources.models.engine.generate(
        "tiny", ["a red sneaker", "a blue circle", "a green house"], [11, 12, 13],
        ImageSettings(steps=12, guidance=5.0, width=32, height=32, cache="deepcache"))

    after = snapshot(m)
    assert len(images) == 3
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 3, 3, 4]
    assert "tiny" in [s.labels.get("model") for family in m.registry.collect()
                      if family.name == "genloop_resident_model_bytes" for s in family.samples]


def test_a_preload_warm_up_is_no_ones_image(resources):
    # Given the process's metrics; When a model is preloaded with its warm-up image
    # (what `genloop worker --preload tiny` does before taking work)
    m = metrics()
    before = snapshot(m)
    resources.models.preload("tiny", warmup=True)
    warmed = snapshot(m)
    # Then the metrics do not move; And a request after it counts exactly its own images
    resources.models.engine.generate("tiny", ["a red circle", "a blue square"], [1, 2],
                                     ImageSettings(steps=2, guidance=5.0, width=32, height=32))
    after = snapshot(m)
    assert warmed == before
    assert [a - b for a, b in zip(after, warmed, strict=True)] == [1, 2, 2, 0]
