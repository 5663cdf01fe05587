"""The training recipes: the CPU one the shipped weights came from, the GPU one for a lent GPU."""

from __future__ import annotations

from genloop.training.shapes import train
from genloop.training.shapes.train_sd import SDTrainConfig
from genloop.workers.shapes.models import build_unet


def test_the_gpu_recipe_fills_a_gpu_and_lets_text_reach_the_16x16_level() -> None:
    sd, _, _ = train._configs(smoke=False, seed=3, recipe="gpu")
    cpu = SDTrainConfig()
    assert sd.seed == 3
    assert sd.unet_batch >= 4 * cpu.unet_batch and sd.pool_size >= 4 * cpu.pool_size
    unet = build_unet(sd.unet)
    assert unet.config.down_block_types[0] == "CrossAttnDownBlock2D"
    assert build_unet(cpu.unet).config.down_block_types[0] == "DownBlock2D"


def test_the_cpu_recipe_stays_the_default() -> None:
    sd, _, _ = train._configs(smoke=False, seed=0)
    assert sd == SDTrainConfig()
