"""The training recipes: the CPU one the shipped weights came from, the GPU one for a lent GPU."""

from __future__ import annotations

from genloop.shapes.models import build_unet
from genloop.shapes.training import train
from genloop.shapes.training.train_sd import SDTrainConfig


def test_the_gpu_recipe_fills_a_gpu_and_lets_text_reach_the_16x16_level() -> None:
    sd, _, _ = train._configs(smoke=False, seed=3, recipe="gpu")
    cpu = SDTrainConfig()
    assert sd.seed == 3
    assert sd.unet_batch >= 4 * cpu.unet_batch and sd.pool_size >= 4 * cpu.pool_size
    unet = build_unet(sd.unet)
    assert unet.config.down_block_types[0] == "CrossAttnDownBlock2D"
    assert build_unet(cpu.unet).config.down_block_types[0] == "DownBlock2D"


def test_both_recipes_weight_the_objects_pool_the_caption_and_lean_to_noise() -> None:
    for recipe in ("cpu", "gpu"):
        sd, _, _ = train._configs(smoke=False, seed=0, recipe=recipe)
        assert sd.unet_foreground_weight > 0
        assert build_unet(sd.unet).config.addition_embed_type == "text"
        # and spend most steps on the noisier half, where the prompt decides what is drawn
        assert sd.unet_timestep_logit is not None and sd.unet_timestep_logit[0] > 0


def test_the_cpu_recipe_stays_the_default() -> None:
    sd, _, _ = train._configs(smoke=False, seed=0)
    assert sd == SDTrainConfig()


def test_the_caption_can_reach_every_block_through_the_timestep_embedding() -> None:
    import torch

    from genloop.shapes.models import (
        CONTEXT_LENGTH,
        LATENT_CHANNELS,
        LATENT_SIZE,
        TEXT_WIDTH,
        UNetShape,
    )

    # Given the option on, the UNet pools the caption into its timestep embedding and runs
    # with the pipeline's usual arguments
    unet = build_unet(UNetShape(text_in_time_embedding=True))
    assert unet.config.addition_embed_type == "text"
    assert build_unet(UNetShape()).config.addition_embed_type is None
    out = unet(torch.randn(2, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE), torch.tensor([1, 900]),
               encoder_hidden_states=torch.randn(2, CONTEXT_LENGTH, TEXT_WIDTH)).sample
    assert out.shape == (2, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE)
