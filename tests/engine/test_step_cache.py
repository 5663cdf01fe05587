"""Step caching: DeepCache on the UNet stays within its stated bound, and "off" is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import psnr

from genloop.workers.engine.deepcache import deepcache_stats, remove_deepcache
from genloop.workers.engine.generate import ImageSettings, call_pipeline
from genloop.workers.engine.step_cache import prepare_step_cache

PROMPTS, SEEDS = ["a red sneaker", "a blue circle", "a green house"], [1, 2, 3]
#: The bound the step-cache docstring states for DeepCache against no caching.
MIN_PSNR_DB = 30.0


def run(pipe, cache: str, steps: int = 12) -> list[np.ndarray]:
    settings = ImageSettings(steps=steps, guidance=5.0, width=32, height=32, cache=cache)
    prepare_step_cache(pipe, cache, steps)
    return [np.asarray(im) for im in call_pipeline(pipe, PROMPTS, SEEDS, settings)]


def test_off_computes_exactly_what_an_unhooked_unet_computes(registry):
    with registry.acquire("tiny") as pipe:
        run(pipe, "deepcache")  # hooks installed and used once
        hooked_off = run(pipe, "off")
        remove_deepcache(pipe.unet)
        unhooked = run(pipe, "off")

    assert all(np.array_equal(a, b) for a, b in zip(hooked_off, unhooked, strict=True))


def test_deepcache_skips_deep_blocks_and_stays_within_the_bound(registry):
    with registry.acquire("tiny") as pipe:
        off = run(pipe, "off")
        cached = run(pipe, "deepcache")
        full, skipped = deepcache_stats(pipe.unet)
        coarse = run(pipe, "deepcache:6")

    # 12 steps, default interval 2: full at 0, 1 (the first 10%), 2, 4, 6, 8, 10, 11 (the last)
    assert (full, skipped) == (8, 4)
    assert any(not np.array_equal(a, b) for a, b in zip(off, cached, strict=True))
    assert min(psnr(a, b) for a, b in zip(off, cached, strict=True)) >= MIN_PSNR_DB
    # a longer interval reuses more and drifts further
    assert np.mean([psnr(a, b) for a, b in zip(off, coarse, strict=True)]) < np.mean(
        [psnr(a, b) for a, b in zip(off, cached, strict=True)])


def test_cached_features_are_not_reused_across_a_batch_size_change(registry):
    with registry.acquire("tiny") as pipe:
        prepare_step_cache(pipe, "deepcache:2", 4)
        x = torch.randn(2, 4, 16, 16)
        ctx = torch.randn(2, 77, 32)
        with torch.no_grad():
            pipe.unet(x, 900, ctx)
            one = pipe.unet(x[:1], 800, ctx[:1]).sample  # cached step, but a smaller batch
        prepare_step_cache(pipe, "off", 4)
        with torch.no_grad():
            exact = pipe.unet(x[:1], 800, ctx[:1]).sample

    assert torch.equal(one, exact)


@pytest.mark.parametrize("mode", ["warp", "deepcache:0", "deepcache:x", "taylorseer:2"])
def test_a_bad_cache_mode_is_refused_before_anything_runs(engine, mode):
    settings = ImageSettings(steps=2, guidance=5.0, width=32, height=32, cache=mode)
    with pytest.raises(ValueError, match="cache mode"):
        engine.submit("tiny", ["a cat"], [0], settings)
    assert engine.batcher.batches == []


def test_transformer_modes_are_refused_on_a_unet_pipeline(registry):
    with registry.acquire("tiny") as pipe, pytest.raises(ValueError, match="transformer"):
        prepare_step_cache(pipe, "fbcache", 4)


@pytest.mark.parametrize(("branch", "outer_runs"), [("layer", 5), ("block", 12)])
def test_the_layer_branch_also_replays_the_outer_level(registry, branch, outer_runs):
    from genloop.workers.engine.deepcache import DeepCacheConfig, apply_deepcache, set_deepcache

    calls = []
    with registry.acquire("tiny") as pipe:
        apply_deepcache(pipe.unet)
        inner = pipe.unet.down_blocks[0].resnets[0]  # runs only when its block really runs
        handle = inner.register_forward_hook(lambda *_: calls.append(1))
        try:
            set_deepcache(pipe.unet, DeepCacheConfig(interval=3, branch=branch), 12)
            settings = ImageSettings(steps=12, guidance=5.0, width=32, height=32)
            call_pipeline(pipe, ["a cat"], [0], settings)
        finally:
            handle.remove()
            set_deepcache(pipe.unet, None)

    assert len(calls) == outer_runs  # 12 steps: 5 full ones


def test_steps_are_told_apart_on_a_gpu_without_reading_the_timestep():
    from genloop.workers.engine.deepcache import DeepCacheConfig, _State, _StepHook

    # Given timesteps on a device whose values cannot be read without a sync (meta: reading
    # raises), each UNet call given the same element twice (cond and uncond passes)
    state = _State()
    state.config, state.num_steps = DeepCacheConfig(interval=2, warmup=1, tail=1), 6
    hook = _StepHook(state)
    timesteps = torch.arange(6.0, device="meta").flip(0)
    sample = torch.empty(2, 4, 8, 8, device="meta")
    for t in timesteps:
        for _ in range(2):
            state.kept = {0: "kept"}  # as if the deep blocks had run
            hook.pre_forward(None, sample, t)
    # Then six steps were counted, two calls each, and the schedule (full, cached) applied
    assert state.step == 5
    assert (state.full_steps, state.cached_steps) == (8, 4)


def test_non_finite_latents_fail_the_call_instead_of_storing_blank_images():
    from genloop.sdk.errors import Permanent
    from genloop.workers.engine.tiny import build_tiny_pipeline

    # Given a pipeline whose UNet outputs NaN (what fp16 overflow looks like)
    pipe = build_tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        pipe.unet.conv_out.bias.fill_(float("nan"))
    settings = ImageSettings(steps=1, guidance=5.0, width=32, height=32, cache="off")
    # Then the call fails, saying why
    with pytest.raises(Permanent, match="NaN"):
        call_pipeline(pipe, ["a kite"], [0], settings)
