"""torch.compile is optional: a failing compiler falls back to eager and changes nothing."""

from __future__ import annotations

import numpy as np

from genloop.workers.engine.compile import Compiler
from genloop.workers.engine.generate import ImageSettings, call_pipeline
from genloop.workers.engine.step_cache import prepare_step_cache

SETTINGS = ImageSettings(steps=2, guidance=5.0, width=32, height=32, cache="off")


def broken_backend(gm, example_inputs):
    raise RuntimeError("no compiler here")


def test_a_failing_compile_falls_back_to_eager_with_identical_images(registry):
    compiler = Compiler(backend=broken_backend)
    with registry.acquire("tiny") as pipe:
        prepare_step_cache(pipe, "off", 2)
        eager = call_pipeline(pipe, ["a cat"], [5], SETTINGS)
        assert compiler.apply(pipe)

        images = compiler.call(pipe, (1, 32, 32), lambda: call_pipeline(
            pipe, ["a cat"], [5], SETTINGS))

        assert not compiler.is_compiled(pipe)
        assert "no compiler here" in next(iter(compiler.failed.values()))
        assert not compiler.apply(pipe)  # never tried again on this model
        again = call_pipeline(pipe, ["a cat"], [5], SETTINGS)  # the model itself is eager again

    assert np.array_equal(np.asarray(images[0]), np.asarray(eager[0]))
    assert np.array_equal(np.asarray(again[0]), np.asarray(eager[0]))


def test_an_engine_with_compile_on_still_generates(tmp_path):
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.registry import ModelRegistry

    reg = ModelRegistry("cpu", engine_options=EngineOptions(
        compile=True, compile_backend=broken_backend, window=0.0))
    try:
        images = reg.engine.generate("tiny", ["a cat"], [5], SETTINGS)
        assert images[0].size == (32, 32)
        assert reg.engine.compiler.failed
    finally:
        reg.engine.close()
