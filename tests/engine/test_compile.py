"""torch.compile is optional: a failing compiler falls back to eager and changes nothing;
batches are padded to a few bucket sizes, so a worker's batches compile a bounded set of shapes
and no region silently drops back to eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genloop.workers.engine.compile import Compiler, bucket
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


@pytest.mark.parametrize(("n", "size"), [(1, 1), (2, 2), (3, 4), (5, 8), (16, 16), (17, 32)])
def test_a_batch_is_padded_to_the_next_power_of_two(n, size):
    assert bucket(n) == size


class CountingBackend:
    """A dynamo backend that runs the traced graph as is, counting compiles and compiled calls."""

    def __init__(self) -> None:
        self.compiles = 0
        self.calls = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1

        def run(*args):
            self.calls += 1
            return gm.forward(*args)

        return run


def test_batches_share_bucket_shapes_and_every_region_stays_compiled():
    from genloop.workers.engine.tiny import build_tiny_pipeline

    # Given the tiny pipeline's UNet, its eager output for a batch of 3, then compiled
    pipe = build_tiny_pipeline()
    unet = pipe.unet
    gen = torch.Generator().manual_seed(0)
    x, ctx = torch.randn(4, 4, 16, 16, generator=gen), torch.randn(4, 77, 32, generator=gen)
    with torch.no_grad():
        eager = unet(x[:3], 500, ctx[:3]).sample
    backend = CountingBackend()
    compiler = Compiler(backend=backend)
    assert compiler.apply(pipe)
    regions = len(compiler._compiled[unet])

    def forward(n: int) -> tuple[torch.Tensor, int, int]:
        compiles, calls = backend.compiles, backend.calls
        with torch.no_grad():
            out = compiler.call(pipe, (n,), lambda: unet(x[:n], 500, ctx[:n]).sample)
        return out, backend.compiles - compiles, backend.calls - calls

    # When batches of 3, then 4, then 1 (a second bucket), then 3 again run
    three, _, calls_three = forward(3)
    four, compiles_four, calls_four = forward(4)
    one, compiles_one, calls_one = forward(1)
    _, compiles_again, _ = forward(3)

    # Then 3 ran padded to 4: one shape for both; 1 is a shape of its own
    assert (three.shape[0], four.shape[0], one.shape[0]) == (3, 4, 1)
    assert compiles_four == compiles_again == 0 and compiles_one > 0
    # every region ran its compiled code at both buckets (dynamo's recompile limit, 8 per
    # function, sends some ResnetBlock2D regions back to eager at the second shape, silently)
    assert calls_three == calls_four == calls_one == regions
    # and the padding changed nothing for the real rows
    torch.testing.assert_close(three, eager, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(four[:3], eager, atol=1e-5, rtol=1e-4)

    # When compile is removed, the padding goes with it
    compiler.remove(pipe)
    with torch.no_grad():
        calls = backend.calls
        unet(x[:3], 500, ctx[:3])
    assert backend.calls == calls


def test_deepcache_on_a_compiled_padded_denoiser_gives_the_eager_images():
    from engine_helpers import psnr

    from genloop.workers.engine.deepcache import deepcache_stats
    from genloop.workers.engine.tiny import build_tiny_pipeline

    # Given DeepCache over a batch of 3 (6 rows with guidance, padded to 8 when compiled)
    pipe = build_tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    settings = ImageSettings(steps=6, guidance=5.0, width=32, height=32, cache="deepcache")
    prompts, seeds = ["a cat", "a red kite", "a blue house"], [1, 2, 3]

    def images():
        prepare_step_cache(pipe, "deepcache", 6)
        return call_pipeline(pipe, prompts, seeds, settings)

    eager = images()
    compiler = Compiler(backend="eager")
    assert compiler.apply(pipe)

    # When the same call runs compiled
    rows = []
    seen = pipe.unet.conv_in.register_forward_pre_hook(lambda m, args: rows.append(len(args[0])))
    compiled = compiler.call(pipe, (3, 32, 32), images)
    seen.remove()

    # Then the kept features were replayed on the padded batch and the images are the same
    assert set(rows) == {8}
    assert deepcache_stats(pipe.unet) == (4, 2)
    assert not compiler.failed
    assert min(psnr(a, b) for a, b in zip(compiled, eager, strict=True)) >= 40.0
