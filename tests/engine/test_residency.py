"""Residency: least recently used models leave when the memory budget is reached."""

from __future__ import annotations

import weakref

import pytest
import torch

from genloop.sdk.errors import Permanent
from genloop.workers.engine.registry import ModelDefaults, ModelRegistry
from genloop.workers.engine.residency import pipeline_bytes
from genloop.workers.engine.tiny import build_tiny_pipeline

TINY = ModelDefaults(steps=1, guidance=5.0, width=32, height=32)


@pytest.fixture(scope="module")
def tiny_bytes():
    return pipeline_bytes(build_tiny_pipeline())


def registry_for(budget: int) -> ModelRegistry:
    reg = ModelRegistry("cpu", memory_budget=budget)
    for name in ("a", "b"):
        reg.register(name, build_tiny_pipeline, f"{name}-v1", TINY)
    return reg


def test_loading_past_the_budget_evicts_the_least_recently_used(tiny_bytes):
    reg = registry_for(int(2.5 * tiny_bytes))
    reg.pipeline("tiny")
    reg.pipeline("a")
    reg.pipeline("tiny")  # now "a" is the least recently used

    reg.pipeline("b")

    assert reg.resident() == ["tiny", "b"]


def test_in_a_pool_a_model_other_workers_hold_is_evicted_before_an_only_copy(tiny_bytes):
    # Given a worker holding "tiny" (least recently used) and "a", room for two, in a pool
    # where another worker holds "a" (and "b") and nobody else "tiny"
    reg = registry_for(int(2.5 * tiny_bytes))
    reg.pipeline("tiny")
    reg.pipeline("a")
    reg.residency.spare = lambda: {"a", "b"}
    # When it loads "b"
    reg.pipeline("b")
    # Then the pool's other copy of "a" went, not the pool's only "tiny"
    assert reg.resident() == ["tiny", "b"]
    # and with nothing held elsewhere the least recently used goes again
    reg.residency.spare = set
    reg.pipeline("a")
    assert reg.resident() == ["b", "a"]


def test_a_model_in_use_is_not_evicted(tiny_bytes):
    reg = registry_for(int(1.5 * tiny_bytes))
    with reg.acquire("a"):
        reg.pipeline("b")  # over budget for a while, rather than pulling "a" out from under a call
        assert set(reg.resident()) == {"a", "b"}
        assert not reg.evict("a")
    reg.pipeline("tiny")
    assert "a" not in reg.resident()


def test_a_model_larger_than_the_budget_is_refused_with_a_hint(tiny_bytes):
    reg = registry_for(tiny_bytes // 2)
    with pytest.raises(Permanent, match=r"raise the budget \(memory_budget_gib, genloop worker "
                                        r"--memory-budget\)"):
        reg.pipeline("a")


def test_preload_loads_and_warms_up(tiny_bytes):
    reg = registry_for(10 * tiny_bytes)
    try:
        reg.preload("a")
        assert reg.resident() == ["a"]
        assert reg.engine.batcher.batches == [1]
    finally:
        reg.engine.close()


def test_an_evicted_model_is_really_freed_even_with_hooks_and_compile_on_it(tiny_bytes):
    from genloop.workers.engine.compile import Compiler
    from genloop.workers.engine.step_cache import prepare_step_cache

    # Given a resident model with DeepCache's hooks on it and registered for compilation
    reg = registry_for(10 * tiny_bytes)
    pipe = reg.pipeline("a")
    prepare_step_cache(pipe, "deepcache", 4)
    compiler = Compiler(backend="eager")
    compiler.apply(pipe)
    unet = weakref.ref(pipe.unet)
    del pipe
    # When it is evicted
    assert reg.evict("a")
    # Then nothing keeps it alive: its memory goes back (on a GPU, memory_allocated drops)
    assert unet() is None


def test_size_is_counted_in_the_dtype_the_model_will_run_in():
    # Given a pipeline built in float32, as the registry builds it before the cast
    pipe = build_tiny_pipeline()
    fp32 = pipeline_bytes(pipe)
    floats = sum(t.numel() * 4 for m in pipe.components.values() if isinstance(m, torch.nn.Module)
                 for t in (*m.parameters(), *m.buffers()) if t.is_floating_point())
    # Then float16 halves the floating-point tensors and leaves the integer ones (token ids)
    assert 0 < floats <= fp32
    assert pipeline_bytes(pipe, torch.float16) == fp32 - floats // 2


def test_threads_asking_for_the_models_at_once_share_one_registry(monkeypatch):
    import threading
    import time
    import types

    from genloop.workers.engine import registry as registry_module
    from genloop.workers.models.resources import Resources

    # Given a registry that takes a while to build (loading, as on a real worker)
    built = []

    class SlowRegistry:
        def __init__(self, device=None, **options):
            time.sleep(0.2)
            self.residency = types.SimpleNamespace(spare=None)  # Resources sets its hook
            built.append(self)

    monkeypatch.setattr(registry_module, "ModelRegistry", SlowRegistry)
    resources = Resources("cpu")
    seen = []
    # When four worker threads ask for the models at the same moment
    threads = [threading.Thread(target=lambda: seen.append(resources.models)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then one registry was built and all four got it
    assert len(built) == 1 and len(seen) == 4 and all(m is built[0] for m in seen)
