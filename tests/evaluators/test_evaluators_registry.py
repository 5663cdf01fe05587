"""Finding evaluators by name: built-ins, user evaluators, caching, and the package's exports."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from PIL import Image, ImageStat

import genloop.evaluators as package
from genloop.evaluators import Evaluator, Scores, evaluator, get_evaluator, register_evaluator
from genloop.evaluators.registry import default_registry
from genloop.sdk.errors import Permanent


def test_all_is_true():
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations", "Any"} <= set(package.__all__)


def test_importing_the_package_loads_no_model_library():
    code = ("import sys, genloop.evaluators; "
            "print('torch' in sys.modules or 'open_clip' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_get_builds_once_per_name_device_and_options(registry):
    first = registry.get("clip", "cpu")
    assert registry.get("clip", "cpu") is first
    assert registry.get("clip", "cpu", seed=1) is not first
    assert first.identity == "clip:tiny-clip-v1"


def test_default_device_is_cpu_without_cuda(registry, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert registry.get("clip").device == "cpu"
    assert registry.get("clip") is registry.get("clip", "cpu")


def test_unknown_name_lists_known_ones(registry):
    with pytest.raises(
        Permanent,
        match=r"unknown evaluator 'clipp'.*aesthetic, brand-palette, clause-critic, clip, "
        r"composite, ensemble, hf-clip",
    ):
        registry.get("clipp")


def test_decorated_function_is_found_by_name(registry, images):
    @evaluator("brightness", version="2", needs_text=False, registry=registry)
    def brightness(batch, text):
        return [ImageStat.Stat(im.convert("L")).mean[0] for im in batch]

    judge = registry.get("brightness")
    scores = judge.score(images[:4], "")  # needs_text=False: an empty prompt is fine
    assert judge.identity == "brightness:2"
    assert scores.values[2] > scores.values[0] > scores.values[3]  # white > red > black
    assert brightness is not judge  # the decorator returns the function itself


def test_decorated_class_gets_device_and_options(registry, images):
    @evaluator("width", registry=registry)
    class Width(Evaluator):
        def __init__(self, device: str, scale: float = 1.0) -> None:
            self.device, self.scale, self.identity = device, scale, f"width:{scale}"

        def _score(self, batch, text):
            return Scores(values=[im.width * self.scale for im in batch], evaluator=self.identity)

    judge = registry.get("width", "cpu", scale=2.0)
    assert judge.score(images[:2], "x").values == [96.0, 98.0]


def test_user_function_returning_wrong_count_is_permanent(registry, images):
    evaluator("broken", registry=registry)(lambda batch, text: [1.0])
    with pytest.raises(Permanent, match="returned 1 scores for 3 images"):
        registry.get("broken").score(images[:3], "x")


def test_duplicate_name_needs_replace(registry):
    registry.register("mine", lambda device: None)
    with pytest.raises(Permanent, match="already registered"):
        registry.register("mine", lambda device: None)
    registry.register("mine", lambda device: None, replace=True)


def test_factory_must_return_an_evaluator(registry):
    registry.register("bad", lambda device: "not an evaluator")
    with pytest.raises(Permanent, match="not an Evaluator"):
        registry.get("bad")


def test_default_registry_functions(images):
    name = "test-default-constant"
    try:
        register_evaluator(name, lambda device: _Constant(device))
        assert get_evaluator(name, "cpu").score(images[:2], "x").values == [7.0, 7.0]
    finally:
        default_registry.unregister(name)
    assert name not in default_registry.names()


class _Constant(Evaluator):
    def __init__(self, device: str) -> None:
        self.device, self.identity = device, "constant:1"

    def _score(self, batch: list[Image.Image], text: str) -> Scores:
        return Scores(values=[7.0] * len(batch), evaluator=self.identity)


def test_concurrent_gets_build_once_and_do_not_block_built_ones(registry):
    import threading
    import time

    started, release, builds = threading.Event(), threading.Event(), []

    def slow(device: str) -> Evaluator:
        builds.append(device)
        started.set()
        release.wait(5)
        return _Constant(device)

    registry.register("slow", slow)
    registry.register("fast", lambda device: _Constant(device))
    fast = registry.get("fast", "cpu")
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(registry.get("slow", "cpu")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    assert started.wait(5)
    t0 = time.perf_counter()
    assert registry.get("fast", "cpu") is fast  # served while "slow" is still loading
    assert time.perf_counter() - t0 < 1
    release.set()
    for thread in threads:
        thread.join(5)
    assert len(builds) == 1 and len(results) == 3 and len({id(r) for r in results}) == 1


def test_package_docstring_example(images):
    # Mirrors the example at the top of genloop/evaluators/__init__.py.
    from genloop.evaluators import get_evaluator, select_top_k_diverse

    judge = get_evaluator("clip", "cpu")
    scores = judge.score(images, "a red bicycle")
    best = select_top_k_diverse(scores.values, scores.embeddings, k=4, diversity=0.5)
    assert len(best) == 4 and best[0] == max(range(len(images)), key=scores.values.__getitem__)
    assert get_evaluator("clip", "cpu") is judge


def test_the_cache_of_built_evaluators_is_bounded_and_keeps_the_recently_used(registry):
    registry.max_instances = 4
    first = registry.get("brand-palette", "cpu", palette=["#000000"])
    for i in range(1, 50):
        registry.get("brand-palette", "cpu", palette=[f"#{i:06x}"])
        assert registry.get("brand-palette", "cpu", palette=["#000000"]) is first  # used: kept
    assert len(registry._instances) == 4
    # The least recently used went: asking for it again builds a new one
    old = registry.get("brand-palette", "cpu", palette=["#000001"])
    assert registry.get("brand-palette", "cpu", palette=["#000001"]) is old


def test_a_thousand_distinct_option_sets_hold_little_memory(registry):
    import tracemalloc

    from genloop.evaluators.options import MAX_PALETTE

    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    for i in range(1000):
        palette = [f"#{(i * MAX_PALETTE + c) % 0xFFFFFF:06x}" for c in range(MAX_PALETTE)]
        registry.get("brand-palette", "cpu", palette=palette)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held - start < 50e6 and len(registry._instances) <= registry.max_instances


def test_a_thousand_option_sets_of_a_heavy_evaluator_stay_within_50_mb(registry):
    import tracemalloc

    from genloop.evaluators import FunctionEvaluator

    # Given an evaluator whose instances each hold 256 KB (a model's weights, a large palette)
    def heavy(device: str, **options) -> Evaluator:
        judge = FunctionEvaluator("heavy", lambda images, text: [0.0] * len(images))
        judge.weights = bytearray(256 * 1024)  # type: ignore[attr-defined]
        return judge

    registry.register("heavy", heavy)
    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    # When 1,000 distinct option sets each build one
    for i in range(1000):
        registry.get("heavy", "cpu", level=i)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Then the cache holds its bound's worth (8 MB), not 1,000 of them (256 MB)
    assert held - start < 50e6
