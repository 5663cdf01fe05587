"""Edits through the engine: img2img and inpainting on the resident pipeline's components,
batched with edits like them and kept apart from text-to-image."""

from __future__ import annotations

from engine_helpers import concurrently
from PIL import Image

from genloop.sdk import Graph, RunStatus
from genloop.workers.engine.generate import ImageSettings

TEXT = ImageSettings(steps=4, guidance=5.0, width=32, height=32, cache="off")
EDIT = ImageSettings(steps=4, guidance=5.0, width=32, height=32, cache="off", kind="img2img",
                     strength=0.5)
INPAINT = ImageSettings(steps=4, guidance=5.0, width=32, height=32, cache="off", kind="inpaint",
                        strength=0.75)


def _init(colour):
    return Image.new("RGB", (32, 32), colour)


def test_edits_batch_together_and_apart_from_text_to_image(engine):
    progress: list[tuple[int, int]] = []
    calls = [
        (["a red sneaker"], [1], EDIT, [_init("red")]),
        (["a blue hat"], [2], EDIT, [_init("blue")]),
        (["a cat"], [3], TEXT, None),
    ]

    out = concurrently(
        lambda p, s, st, init: engine.generate(
            "tiny", p, s, st, init_images=init,
            on_step=(lambda d, t: progress.append((d, t))) if init else None),
        calls)

    assert sorted(engine.batcher.batches) == [1, 2]
    assert all(len(images) == 1 and images[0].size == (32, 32) for images in out)
    assert {t for _, t in progress} == {EDIT.denoised_steps} == {2}  # 4 steps x 0.5


def test_the_edit_pipeline_shares_the_resident_weights(registry, engine):
    engine.generate("tiny", ["a dog"], [0], EDIT, init_images=[_init("white")])

    with registry.acquire("tiny") as pipe:
        derived = engine._edit_pipe(pipe, "img2img")
        assert derived is not pipe and derived.unet is pipe.unet and derived.vae is pipe.vae


def test_inpainting_takes_a_mask_per_candidate(engine):
    mask = Image.new("L", (32, 32), 0)
    mask.paste(255, (16, 0, 32, 32))

    images = engine.generate("tiny", ["a cat", "a dog"], [0, 1], INPAINT,
                             init_images=[_init("gray")] * 2, masks=[mask] * 2)

    assert len(images) == 2 and engine.batcher.batches == [2]


def test_an_edit_without_its_images_is_refused(engine):
    import pytest

    with pytest.raises(ValueError, match="init images"):
        engine.submit("tiny", ["a cat"], [0], EDIT)


def test_generate_edits_a_stored_image_and_keys_the_result_by_it(client):
    g = Graph()
    g.generate("a red sneaker", n=1, steps=4, id="source")
    source = client.submit(g).wait(timeout=120).items("source")[0]

    def edit_of(key):
        e = Graph()
        e.generate("a red sneaker, blue laces", n=2, steps=4, init_image=key, strength=0.5,
                   id="edit")
        return client.submit(e).wait(timeout=120)

    result = edit_of(source.artifact)

    assert result.status == RunStatus.SUCCEEDED
    edits = result.items("edit")
    assert {c.init_image for c in edits} == {source.artifact}
    assert [c.cost for c in edits] == [2, 2] and result.compute.steps == 4
    other = Graph()
    other.generate("a red sneaker", n=1, steps=4, seed=7, id="source")
    second = client.submit(other).wait(timeout=120).items("source")[0]
    assert edit_of(second.artifact).items("edit")[0].artifact != edits[0].artifact
