"""Approximate reuse (``reuse="auto"``): an image may start from a similar prompt's stored
latents of the same seed, and only within one model identity, size, settings and namespace."""

from __future__ import annotations

import io

import pytest
import torch
from diffusers import StableDiffusionPipeline
from engine_helpers import psnr
from PIL import Image

from genloop.sdk import Graph, GraphError
from genloop.workers.engine import engine as engine_module
from genloop.workers.engine import latent_cache
from genloop.workers.engine.engine import EngineOptions
from genloop.workers.engine.generate import ImageSettings
from genloop.workers.engine.latent_cache import LatentCache, Scope, skipped_steps
from genloop.workers.engine.registry import ModelRegistry
from genloop.workers.metrics.prometheus import metrics
from genloop.workers.runtime.keys import result_key

RED = "a large red circle in the centre, black background"
BLUE = "a large blue circle in the centre, black background"
# Ten steps: the table's 10% row skips one of them.
SETTINGS = ImageSettings(steps=10, guidance=2.0, width=32, height=32, cache="off")


@pytest.fixture(scope="module")
def engine():
    reg = ModelRegistry("cpu", engine_options=EngineOptions(window=0.3, max_batch=8))
    yield reg.engine
    reg.engine.close()


@pytest.fixture(autouse=True)
def empty_cache(engine):
    engine.latents = LatentCache()


def scope(**changes) -> Scope:
    base = dict(model="m", width=32, height=32, steps=10, guidance=2.0, cache="default",
                negative_prompt="", seed=0, namespace=None)
    return Scope(**{**base, **changes})


def unit(*values: float) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.tensor(values), dim=0)


def test_reuse_happens_only_above_the_tables_least_similarity():
    least, fraction = latent_cache.REUSE_TABLE[-1]
    cache = LatentCache()
    cache.put(scope(), "source", unit(1.0, 0.0), {1: torch.ones(4, 2, 2)})
    below = unit(least - 0.05, (1 - (least - 0.05) ** 2) ** 0.5)
    above = unit(least + 0.01, (1 - (least + 0.01) ** 2) ** 0.5)

    assert cache.find(scope(), below) is None
    start = cache.find(scope(), above)
    assert start is not None and start.source == "source"
    assert start.step == int(10 * fraction) == 1
    assert start.similarity == pytest.approx(least + 0.01, abs=1e-5)
    assert skipped_steps(least - 0.05, 10) == 0


def test_a_start_is_the_furthest_step_the_nearest_prompt_holds(monkeypatch):
    monkeypatch.setattr(latent_cache, "REUSE_TABLE", ((0.9, 0.5), (0.5, 0.2)))
    cache = LatentCache()
    cache.put(scope(), "started part-way", unit(1.0, 0.0), {5: torch.ones(1)})
    cache.put(scope(seed=1), "from noise", unit(1.0, 0.0), {2: torch.ones(1), 5: torch.ones(1)})

    assert cache.find(scope(), unit(1.0, 0.0)).step == 5  # similar: half the schedule
    assert cache.find(scope(seed=1), unit(0.6, 0.8)).step == 2  # less similar: a fifth
    assert cache.find(scope(), unit(0.6, 0.8)) is None  # a fifth, and step 2 is not held


@pytest.mark.parametrize("other", [
    {"model": "another-identity"}, {"width": 64}, {"height": 64}, {"steps": 20},
    {"guidance": 4.0}, {"cache": "off"}, {"negative_prompt": "blurry"}, {"seed": 1},
    {"namespace": "tenant-b"},
])
def test_nothing_is_reused_outside_its_scope(other):
    stored = scope(namespace="tenant-a" if "namespace" in other else None)
    cache = LatentCache()
    cache.put(stored, "source", unit(1.0, 0.0), {1: torch.ones(4, 2, 2), 2: torch.ones(4, 2, 2)})

    assert cache.find(scope(**other), unit(1.0, 0.0)) is None
    assert cache.find(stored, unit(1.0, 0.0)) is not None  # the control: its own scope does


def test_the_cache_is_bounded_by_bytes_oldest_out_first():
    entry = {1: torch.ones(4, 8, 8)}  # 1,024 bytes and a 8-byte vector
    cache = LatentCache(max_bytes=2 * 1032)
    cache.put(scope(seed=0), "a", unit(1.0, 0.0), entry)
    cache.put(scope(seed=1), "b", unit(1.0, 0.0), entry)
    assert cache.find(scope(seed=0), unit(1.0, 0.0)) is not None  # a: now the most recent

    cache.put(scope(seed=2), "c", unit(1.0, 0.0), entry)

    assert len(cache) == 2 and cache.nbytes == 2 * 1032
    assert cache.find(scope(seed=1), unit(1.0, 0.0)) is None
    assert cache.find(scope(seed=0), unit(1.0, 0.0)) is not None
    LatentCache(max_bytes=100).put(scope(), "too big", unit(1.0, 0.0), entry)  # kept out, no error


def test_a_request_starts_from_a_similar_prompt_of_its_seed_only_when_it_asks(engine):
    # A request that asks for reuse keeps its latents for later ones (it finds none before it)
    first = engine.submit("tiny", [RED, RED], [0, 1], SETTINGS, reuse=True)
    engine.wait(first)
    assert first.starts == [None, None] and len(engine.latents) == 2
    skipped = metrics().steps_reused._value.get()

    auto = engine.submit("tiny", [BLUE, BLUE, BLUE], [0, 1, 2], SETTINGS, reuse=True)
    images = engine.wait(auto)
    off = engine.submit("tiny", [BLUE, BLUE, BLUE], [0, 1, 2], SETTINGS)
    off_images = engine.wait(off)

    # Seeds 0 and 1 were drawn for the red prompt, seed 2 never
    assert [(s.source, s.step) for s in auto.starts[:2]] == [(RED, 1), (RED, 1)]
    assert auto.starts[2] is None and off.starts == [None] * 3
    assert len(engine.latents) == 3  # seed 2's blue image is kept; the off request kept none
    assert metrics().steps_reused._value.get() - skipped == 2  # genloop_steps_reused_total
    close = [psnr(a, b) for a, b in zip(images[:2], off_images[:2], strict=True)]
    assert all(30 < value < float("inf") for value in close)  # near, and not the same image
    assert psnr(images[2], off_images[2]) > 40


def test_no_reuse_across_models_sizes_or_namespaces(engine):
    engine.wait(engine.submit("tiny", [RED], [0], SETTINGS, reuse=True, namespace="tenant-a"))
    bigger = ImageSettings(steps=10, guidance=2.0, width=48, height=48, cache="off")

    cases = [
        engine.submit("tiny", [RED], [0], SETTINGS, reuse=True, namespace="tenant-b"),
        engine.submit("tiny", [RED], [0], SETTINGS, reuse=True),  # no namespace
        engine.submit("tiny", [RED], [0], bigger, reuse=True, namespace="tenant-a"),
        engine.submit("tiny", [RED], [1], SETTINGS, reuse=True, namespace="tenant-a"),
    ]
    for job in cases:
        engine.wait(job)
        assert job.starts == [None]
    again = engine.submit("tiny", [RED], [0], SETTINGS, reuse=True, namespace="tenant-a")
    engine.wait(again)
    assert again.starts[0] is not None  # the control: the same scope does reuse


@pytest.mark.parametrize("joins", [True, False], ids=["joining", "a-call-per-start"])
def test_one_batch_of_mixed_start_steps_gives_each_request_its_images(engine, joins,
                                                                    monkeypatch):
    # A Stable Diffusion pipeline (tiny is one) runs later starts by joining the running batch;
    # other pipelines run a call per start step. Either way each request gets its own images.
    if not joins:
        monkeypatch.setattr(engine_module, "joins_midway", lambda pipe: False)
    engine.wait(engine.submit("tiny", [RED, RED], [0, 1], SETTINGS, reuse=True))
    alone_reused = engine.submit("tiny", [BLUE, BLUE], [0, 1], SETTINGS, reuse=True)
    expected_reused = engine.wait(alone_reused)
    expected_fresh = engine.wait(engine.submit("tiny", [BLUE], [7], SETTINGS))
    engine.latents = LatentCache()
    engine.wait(engine.submit("tiny", [RED, RED], [0, 1], SETTINGS, reuse=True))
    batches = len(engine.batcher.batches)
    calls: list[int] = []  # the prompts each pipeline call starts with
    pipeline_call = StableDiffusionPipeline.__call__

    def counted(pipe, *args, **kwargs):
        calls.append(len(kwargs["prompt"]))
        return pipeline_call(pipe, *args, **kwargs)

    monkeypatch.setattr(StableDiffusionPipeline, "__call__", counted)
    reused = engine.submit("tiny", [BLUE, BLUE], [0, 1], SETTINGS, reuse=True)
    fresh = engine.submit("tiny", [BLUE], [7], SETTINGS, reuse=True)
    got_reused, got_fresh = engine.wait(reused), engine.wait(fresh)

    assert engine.batcher.batches[batches:] == [3]  # one batch
    # joining: one call from noise, the reused pair joining it; else a call per start step
    assert calls == ([1] if joins else [1, 2])
    assert [s.step for s in reused.starts] == [1, 1] and fresh.starts == [None]
    assert all(psnr(a, b) > 40 for a, b in zip(got_reused, expected_reused, strict=True))
    assert psnr(got_fresh[0], expected_fresh[0]) > 40


def test_reuse_is_keyed_apart_and_off_keeps_the_keys_stored_before_it():
    base = {"prompt": "p", "n": 1}
    without = result_key("generate", "2", base, [], "id")

    assert result_key("generate", "2", {**base, "reuse": "off"}, [], "id") == without
    assert result_key("generate", "2", {**base, "reuse": "auto"}, [], "id") != without


def test_a_bad_reuse_mode_is_refused_naming_the_field_and_the_choices_once(client):
    g = Graph()
    g.generate(RED, model="tiny", reuse="sometimes")

    with pytest.raises(GraphError) as caught:
        client.submit(g)

    text = str(caught.value)
    assert "nodes[0].params.reuse" in text and "'sometimes'" in text
    assert text.count("'off' or 'auto'") == 1


def _pixels(client, candidate):
    return Image.open(io.BytesIO(client.read_artifact(candidate.artifact))).convert("RGB")


def test_a_stored_result_does_not_change_when_the_cache_is_emptied(client):
    def run(prompt: str, reuse: str):
        g = Graph()
        node = g.generate(prompt, model="tiny", n=2, steps=10, cache="off", reuse=reuse, id="g")
        result = client.submit(g).wait(timeout=180)
        assert result.status == "succeeded", result
        return result.items(node)

    run(RED, "auto")
    first = run(BLUE, "auto")
    assert [c.started_from.prompt for c in first] == [RED, RED]
    assert [c.cost for c in first] == [10 - c.started_from.step for c in first]
    engine = client.backend.runtime.resources.models.engine
    engine.latents = LatentCache()  # evicted, all of it

    again = run(BLUE, "auto")
    fresh = run(BLUE, "off")

    assert [c.artifact for c in again] == [c.artifact for c in first]  # the stored result
    assert [c.started_from for c in fresh] == [None, None]
    assert all(psnr(_pixels(client, a), _pixels(client, b)) > 30
               for a, b in zip(first, fresh, strict=True))
