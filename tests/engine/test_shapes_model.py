"""Once the trained shapes pipeline ships in the package, the registry serves it as ``shapes``."""

from __future__ import annotations

import pytest

from genloop import shapes
from genloop.workers.engine.generate import ImageSettings
from genloop.workers.engine.registry import ModelRegistry
from genloop.workers.engine.tiny import build_tiny_pipeline


def test_shipped_shapes_weights_are_registered_with_their_defaults(tmp_path, monkeypatch):
    # Given a diffusers pipeline directory where the shapes weights live (tiny stands in)
    build_tiny_pipeline().save_pretrained(tmp_path / "shapes-sd")
    monkeypatch.setattr(shapes, "pipeline_path", lambda: tmp_path / "shapes-sd")

    reg = ModelRegistry("cpu")
    try:
        # Then "shapes" has the package's sampling defaults and the size its config implies
        d = reg.defaults("shapes")
        assert (d.steps, d.guidance) == (shapes.DEFAULT_STEPS, shapes.DEFAULT_GUIDANCE)
        assert (d.width, d.height) == (32, 32)  # UNet sample size 16 x VAE factor 2
        assert reg.identity("shapes").startswith("shapes:")
        images = reg.engine.generate("shapes", ["a red circle"], [0], ImageSettings(
            steps=2, guidance=d.guidance, width=d.width, height=d.height))
        assert images[0].size == (32, 32)
    finally:
        reg.engine.close()


def test_without_shipped_weights_there_is_no_shapes_model(tmp_path, monkeypatch):
    monkeypatch.setattr(shapes, "pipeline_path", lambda: tmp_path / "missing")

    assert "shapes" not in ModelRegistry("cpu")._builtin


@pytest.mark.skipif(not (shapes.pipeline_path() / "model_index.json").is_file(),
                    reason="the trained shapes pipeline is not in the package")
def test_default_step_cache_keeps_every_shapes_image_within_the_bound():
    import numpy as np
    import torch
    from engine_helpers import psnr

    from genloop.workers.engine.generate import call_pipeline
    from genloop.workers.engine.step_cache import prepare_step_cache

    reg = ModelRegistry("cpu")
    d = reg.defaults("shapes")
    settings = ImageSettings(steps=d.steps, guidance=d.guidance, width=d.width, height=d.height)
    prompts = [a.caption() for a in shapes.heldout_prompts(16)]
    seeds = list(range(16))
    with reg.acquire("shapes") as pipe, torch.no_grad():
        prepare_step_cache(pipe, "off", d.steps)
        off = call_pipeline(pipe, prompts, seeds, settings)
        prepare_step_cache(pipe, "default", d.steps)
        cached = call_pipeline(pipe, prompts, seeds, settings)

    values = [psnr(a, b) for a, b in zip(off, cached, strict=True)]
    assert min(values) >= 30.0, values  # the bound step_cache's docstring states
    assert np.median(values) < 100  # and caching did change something
