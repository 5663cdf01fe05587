"""A few-step training run writes models that load through the same code paths as real ones."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.slow
def test_training_smoke_writes_loadable_models(tmp_path: Path) -> None:
    import open_clip
    import torch
    from diffusers import StableDiffusionPipeline

    from genloop.workers.shapes import train
    from genloop.workers.shapes.models import register_clip_config

    threads = torch.get_num_threads()
    try:
        # When the smoke configuration trains both models
        train.main(["--out", str(tmp_path), "--smoke"])
    finally:
        torch.set_num_threads(threads)
    # Then the pipeline loads with from_pretrained and samples at 32x32
    pipe = StableDiffusionPipeline.from_pretrained(str(tmp_path / "shapes-sd"))
    pipe.set_progress_bar_config(disable=True)
    image = pipe("a small blue square on the left, white background", num_inference_steps=2,
                 generator=torch.Generator().manual_seed(0)).images[0]
    assert image.size == (32, 32)
    assert not (tmp_path / "shapes-sd" / "tokenizer" / "tokenizer.json").exists()
    # And the CLIP checkpoint loads through open_clip's pretrained= path
    name = register_clip_config(tmp_path / "shapes-clip" / "shapes-clip.json")
    model, _, _ = open_clip.create_model_and_transforms(
        name, pretrained=str(tmp_path / "shapes-clip" / "open_clip_model.safetensors"))
    assert model.visual.image_size == (32, 32)
