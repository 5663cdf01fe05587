"""The hard-negative miner labels generated images by the checker's verdicts alone, and only
ever prompts with training seeds (never a held-out seed or colour-shape combination)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from genloop.shapes import dataset, grade
from genloop.shapes.training.mining import MiningConfig, mine, mining_scenes, verdict


class RecordingPipeline:
    """Stands in for the generator: draws the prompt for even seeds, a wrong scene for odd
    ones, and records every prompt it is asked for."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, prompts, num_inference_steps, guidance_scale, output_type, generator):
        self.prompts += prompts
        images = []
        for prompt, gen in zip(prompts, generator, strict=True):
            scene = dataset.parse_caption(prompt)
            if gen.initial_seed() % 2:
                clause = "shape" if len(scene.things) == 1 else "first.shape"
                scene = dataset.one_attribute_variants(scene, clause)[0]
            images.append(np.asarray(dataset.sample_scene(scene, 0).image) / 255.0)
        return SimpleNamespace(images=np.stack(images))


def test_labels_are_the_checkers_verdicts_on_the_generated_images() -> None:
    # Given a generator that gets odd seeds wrong
    pipe = RecordingPipeline()
    cfg = MiningConfig(prompts=6, images_per_prompt=2, batch=5)
    # When the miner runs
    mined, images = mine(pipe, cfg)
    # Then each label is exactly the checker's verdict on the image the generator returned
    assert images.shape == (12, 64, 64, 3)
    for prompt, correct, reading, image in zip(mined.prompts, mined.correct, mined.readings,
                                               images, strict=True):
        from PIL import Image

        found = grade(dataset.parse_caption(prompt), Image.fromarray(image))
        assert correct == found.all_correct
        assert (reading is None) == correct
    assert mined.correct == [True, False] * 6
    assert [len(g) for g in mined.groups()] == [2] * 6


def test_miner_prompts_only_training_scenes() -> None:
    pipe = RecordingPipeline()
    cfg = MiningConfig(prompts=40, images_per_prompt=1, batch=40)
    mine(pipe, cfg)
    expected = [dataset.training_sample(s).caption
                for s in range(cfg.seed_offset, cfg.seed_offset + 40)]
    assert pipe.prompts == expected
    assert not any(dataset.is_novel(dataset.parse_caption(p)) for p in pipe.prompts)
    heldout = {s.caption() for s in dataset.novel_prompts(50, objects=1)}
    assert heldout.isdisjoint(pipe.prompts)


def test_miner_refuses_heldout_seeds() -> None:
    cfg = MiningConfig(prompts=10, seed_offset=dataset.HELDOUT_SEED_START - 5)
    with pytest.raises(ValueError, match="held out"):
        mining_scenes(cfg)


def test_a_failed_image_is_relabelled_with_what_the_checker_read() -> None:
    prompt = dataset.parse_caption("a small red star left of a large blue square, white background")
    drawn = prompt.model_copy(update={"relation": "above"})
    v = verdict(prompt, dataset.sample_scene(drawn, 1).image)
    assert not v.correct
    assert dataset.parse_caption(v.reading).canonical() == drawn.canonical()
    assert verdict(prompt, dataset.sample_scene(prompt, 1).image).correct
