"""Step caching: DeepCache on the UNet stays within its stated bound, and "off" is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import concurrently, psnr

from genloop.workers.engine.deepcache import deepcache_stats, remove_deepcache
from genloop.workers.engine.generate import ImageSettings, call_pipeline
from genloop.workers.engine.step_cache import MIN_DEFAULT_DEEPCACHE_STEPS, prepare_step_cache

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


def test_the_default_mode_runs_short_calls_without_deepcache(registry):
    with registry.acquire("tiny") as pipe:
        short = prepare_step_cache(pipe, "default", MIN_DEFAULT_DEEPCACHE_STEPS - 1)
        off = run(pipe, "off", steps=MIN_DEFAULT_DEEPCACHE_STEPS - 1)
        plain = run(pipe, "default", steps=MIN_DEFAULT_DEEPCACHE_STEPS - 1)
        long = prepare_step_cache(pipe, "default", MIN_DEFAULT_DEEPCACHE_STEPS)
        asked = prepare_step_cache(pipe, "deepcache", 4)

    assert (short.kind, long.kind, asked.kind) == ("off", "deepcache", "deepcache")
    assert all(np.array_equal(a, b) for a, b in zip(off, plain, strict=True))


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


def test_transformer_modes_are_refused_on_a_unet_pipeline_for_good(registry):
    from genloop.sdk.errors import Permanent

    with registry.acquire("tiny") as pipe, pytest.raises(
            Permanent, match="'fbcache' cannot run on UNet .* UNet2DConditionModel lacks"):
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


def test_steps_are_counted_on_the_host_without_reading_the_timestep(registry):
    from diffusers.hooks import HookRegistry

    from genloop.workers.engine.deepcache import (
        _STEP_HOOK,
        DeepCacheConfig,
        apply_deepcache,
        deepcache_stats,
        deepcache_step_end,
        set_deepcache,
    )

    with registry.acquire("tiny") as pipe:
        unet = pipe.unet
        apply_deepcache(unet)
        hook = HookRegistry.check_if_exists_or_initialize(unet).get_hook(_STEP_HOOK)
        set_deepcache(unet, DeepCacheConfig(interval=2, warmup=1, tail=1), 6)
        # Given a timestep whose value cannot be read (a meta tensor: reading it raises, as a
        # host sync on a GPU tensor would stall) and that is the same tensor at every step
        t = torch.empty((), device="meta")
        sample = torch.empty(2, 4, 8, 8)
        # When six steps each call the UNet twice (cond, uncond) and the callback reports them
        for step in range(6):
            for _ in range(2):
                hook.state.kept = {0: "kept"}  # as if the deep blocks had run
                hook.pre_forward(unet, sample, t)
            deepcache_step_end(unet, step)
        stats = deepcache_stats(unet)
        set_deepcache(unet, None)

    # Then six steps were told apart and the schedule applied: full at 0, 2, 4 and 5 (the last)
    assert stats == (8, 4)


def test_deepcache_gives_a_candidate_the_same_image_batched_or_alone(registry, engine):
    # Given three requests with DeepCache on, submitted at once (one batch of 3)
    settings = ImageSettings(steps=8, guidance=5.0, width=32, height=32, cache="deepcache")
    jobs = [([p], [s]) for p, s in zip(PROMPTS, SEEDS, strict=True)]

    out = concurrently(lambda p, s: engine.generate("tiny", p, s, settings), jobs)

    # Then they ran batched, and each image is the one its request gets alone with DeepCache
    assert engine.batcher.batches == [3]
    with registry.acquire("tiny") as pipe:
        alone = []
        for prompt, seed in zip(PROMPTS, SEEDS, strict=True):
            prepare_step_cache(pipe, "deepcache", 8)
            alone += call_pipeline(pipe, [prompt], [seed], settings)
            assert deepcache_stats(pipe.unet) == (5, 3)  # full at 0, 2, 4, 6, 7
        prepare_step_cache(pipe, "off", 8)
        off = call_pipeline(pipe, PROMPTS, SEEDS, settings)
    got = [images[0] for images in out]
    assert min(psnr(a, b) for a, b in zip(got, alone, strict=True)) >= 40.0
    assert max(psnr(a, b) for a, b in zip(got, off, strict=True)) < 60.0  # and not uncached


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


def _zero(value) -> None:
    if isinstance(value, torch.Tensor):
        value.zero_()
    elif isinstance(value, tuple):
        for v in value:
            _zero(v)


def _cached_step(registry, overwrite: bool, cudagraphs: bool) -> tuple[torch.Tensor, list]:
    """A full step then a cached one of the tiny UNet, with DeepCache every 2 steps; with
    ``overwrite``, every hooked block's output zeroed between them (what a CUDA-graph replay
    does to its output buffers), with ``cudagraphs`` the UNet marked as compiled to replay CUDA
    graphs (the bucket hook a :class:`Compiler` in that mode installs). Returns the cached
    step's output and what the hooked blocks returned on the full step."""
    from diffusers.hooks import HookRegistry

    from genloop.workers.engine.compile import _BUCKET_HOOK, _BatchBucketHook
    from genloop.workers.engine.deepcache import _deep_blocks, _outer_layers, deepcache_step_end

    x, ctx = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(0)), \
        torch.randn(2, 77, 32, generator=torch.Generator().manual_seed(1))
    returned: list = []
    handles: list = []
    with registry.acquire("tiny") as pipe:
        unet = pipe.unet
        hooks = HookRegistry.check_if_exists_or_initialize(unet)
        if cudagraphs:
            hooks.register_hook(_BatchBucketHook(cudagraphs=True), _BUCKET_HOOK)
        try:
            prepare_step_cache(pipe, "deepcache:2", 4)  # step 0 full, step 1 cached
            handles = [block.register_forward_hook(lambda _m, _a, out: returned.append(out))
                       for block in _deep_blocks(unet) + _outer_layers(unet)]
            with torch.no_grad():
                unet(x, 900, ctx)
                for handle in handles:
                    handle.remove()
                if overwrite:
                    _zero(tuple(returned))
                deepcache_step_end(unet, 0)
                out = unet(x, 800, ctx).sample
            assert deepcache_stats(unet) == (1, 1)
        finally:
            for handle in handles:
                handle.remove()
            if cudagraphs:
                hooks.remove_hook(_BUCKET_HOOK, recurse=False)
            prepare_step_cache(pipe, "off", 4)
    return out, returned


def test_kept_features_survive_cuda_graphs_rewriting_their_output_buffers(registry):
    # CUDA graphs (torch.compile's reduce-overhead mode) replay into the same output memory on
    # every call: what a block returned on a full step is overwritten before a cached step reads
    # it. Simulated by zeroing every hooked block's output once the full step is done.
    overwritten, _ = _cached_step(registry, overwrite=True, cudagraphs=True)
    untouched, _ = _cached_step(registry, overwrite=False, cudagraphs=True)
    assert torch.equal(overwritten, untouched)


def test_an_eager_unet_s_kept_features_are_its_blocks_outputs_not_copies(registry):
    # Given an eager UNet (no CUDA graphs): nothing writes its blocks' outputs again, so
    # When a full step keeps them, Then it keeps the very tensors the blocks returned: a cached
    # step replays those (zeroing them changes the cached step: no copy was made)
    overwritten, returned = _cached_step(registry, overwrite=True, cudagraphs=False)
    untouched, _ = _cached_step(registry, overwrite=False, cudagraphs=False)
    assert returned and not torch.equal(overwritten, untouched)
