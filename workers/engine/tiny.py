"""``tiny``: a Stable-Diffusion-shaped pipeline small enough for tests and CPU demos.

Built offline from configs with deterministic random weights: a UNet2DConditionModel, an
AutoencoderKL and a CLIPTextModel, with CLIP's real tokenizer. It draws noise-like pictures,
but through exactly the code path a real ``from_pretrained`` pipeline takes.
"""

from __future__ import annotations

import torch


def build_tiny_pipeline():
    from diffusers import (
        AutoencoderKL,
        EulerDiscreteScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    from .tokenizer import VOCAB_SIZE, clip_tokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )
    torch.manual_seed(1)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(32, 64),
        latent_channels=4,
        norm_num_groups=8,
        sample_size=32,
    )
    torch.manual_seed(2)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=VOCAB_SIZE, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=77, projection_dim=32,
        bos_token_id=49406, eos_token_id=49407, pad_token_id=49407,
    ))
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
        num_train_timesteps=1000, steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=clip_tokenizer(), unet=unet,
        scheduler=scheduler, safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
