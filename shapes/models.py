"""Architectures of the shapes models (v2: 64x64 images, 16x16 latents), built from configs.

Sizes are chosen for one CPU core and a 30 MB package: most bytes are the two 49,408-row token
embedding tables that the CLIP BPE vocabulary forces on both text encoders, so their width is
kept small (32 for the generator's, 64 for shapes-clip's); the image side is small because a
flat shape carries little information.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

# From their modules: diffusers' top-level names are typed as its placeholder classes (its
# __init__ imports those first under TYPE_CHECKING), which have no tensor methods.
from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
from diffusers.models.unets.unet_2d_condition import UNet2DConditionModel
from diffusers.schedulers.scheduling_ddim import DDIMScheduler
from pydantic import BaseModel
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

CLIP_MODEL_NAME = "shapes-clip"
# The longest caption (two objects) is 15 tokens; 32 keeps cross-attention cheap.
CONTEXT_LENGTH = 32
VOCAB_SIZE = 49408
TEXT_WIDTH = 32
IMAGE_SIZE = 64
# The VAE downsamples twice (64 -> 16): v1's 8x8 latents blurred small stars and squares into
# circles. Eight channels rather than Stable Diffusion's four: with four, v1's round trips lost a
# quarter of the colours.
LATENT_SIZE = 16
LATENT_CHANNELS = 8
# Captions are ~12 tokens; a short CLIP context makes contrastive training 3x cheaper.
CLIP_CONTEXT_LENGTH = 24
# shapes-clip's text tower is twice the generator's width: at 32, after 1,000 steps, it ranked
# the true caption first for a pair's relation 0.86 and order 0.82 of the time; at 64 (four
# heads), 1.00 and 1.00. The 3 MB it adds to the token table stays within the package budget.
CLIP_TEXT_WIDTH = 64

# The image tower is open_clip's ModifiedResNet (convolutions down to 2x2, attention pooling),
# not a ViT: with 8x8 patches a ViT of the same cost ranked the true caption of clean two-object
# renders first for the shape clause 0.33 of the time after 1,000 steps (0.43 fully trained),
# the ResNet 0.99: a shape is an edge pattern that convolutions see at every offset, while a
# patch embedding sees a different piece of it at each jitter.
CLIP_CONFIG: dict[str, Any] = {
    "embed_dim": 64,
    "vision_cfg": {
        "image_size": IMAGE_SIZE,
        "layers": [1, 1, 1, 1],
        "width": 16,
    },
    "text_cfg": {
        "context_length": CLIP_CONTEXT_LENGTH,
        "vocab_size": VOCAB_SIZE,
        "width": CLIP_TEXT_WIDTH,
        "heads": 4,
        "layers": 3,
        "mlp_ratio": 2.0,
    },
}


def build_vae() -> AutoencoderKL:
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        block_out_channels=(16, 32, 64),
        layers_per_block=1,
        latent_channels=LATENT_CHANNELS,
        norm_num_groups=8,
        sample_size=IMAGE_SIZE,
        # Convolutions only: the VAE trains on crops, and needs no global view of a flat shape.
        mid_block_add_attention=False,
    )


def build_text_encoder() -> CLIPTextModel:
    return CLIPTextModel(
        CLIPTextConfig(
            vocab_size=VOCAB_SIZE,
            hidden_size=TEXT_WIDTH,
            intermediate_size=2 * TEXT_WIDTH,
            num_hidden_layers=3,
            num_attention_heads=2,
            max_position_embeddings=CONTEXT_LENGTH,
            bos_token_id=49406,
            eos_token_id=49407,
            pad_token_id=49407,
        )
    )


class UNetShape(BaseModel):
    """The UNet's free choices (the rest is fixed by the latents and the text encoder)."""

    #: Channels at 16x16, 8x8, 4x4 and 2x2.
    widths: tuple[int, int, int, int] = (32, 64, 64, 64)
    #: Cross- and self-attention at 16x16 as well: text reaches the level where a small
    #: shape's corners are drawn, not only the coarser ones.
    attention_at_16: bool = False
    #: The caption, attention-pooled, added to the timestep embedding (diffusers'
    #: ``addition_embed_type="text"``): every resnet block, the 16x16 ones too, sees what the
    #: prompt asks for at the cost of one pooling per step rather than attention per pixel.
    text_in_time_embedding: bool = False


def build_unet(shape: UNetShape | None = None) -> UNet2DConditionModel:
    shape = shape or UNetShape()
    top = "CrossAttn" if shape.attention_at_16 else ""
    return UNet2DConditionModel(
        sample_size=LATENT_SIZE,
        in_channels=LATENT_CHANNELS,
        out_channels=LATENT_CHANNELS,
        layers_per_block=1,
        # Four levels (16 -> 8 -> 4 -> 2): at 2x2 every cell touches a different corner of the
        # zero padding, which is what lets a convolutional net place a shape where the prompt
        # says (v1, with two levels, left position at chance). Without attention_at_16 the
        # 16x16 level only refines edges (the v2 run's choice: there, on a CPU, cross-attention
        # would cost more than the rest).
        block_out_channels=shape.widths,
        down_block_types=(f"{top}DownBlock2D",) + ("CrossAttnDownBlock2D",) * 3,
        up_block_types=("CrossAttnUpBlock2D",) * 3 + (f"{top}UpBlock2D",),
        cross_attention_dim=TEXT_WIDTH,
        addition_embed_type="text" if shape.text_in_time_embedding else None,
        addition_embed_type_num_heads=2,
        attention_head_dim=4,
        norm_num_groups=16,
    )


def build_scheduler() -> DDIMScheduler:
    """Stable Diffusion's betas rescaled to zero terminal SNR, v-prediction, "trailing" spacing.

    With SD's own schedule the last training step still holds 7% of the image, so the model
    learnt to read a shape's position from that leftover signal rather than from the prompt;
    sampling from pure noise then put shapes wherever the noise said (position at chance, 20%).
    At zero terminal SNR the first sampling step must predict the image from the text alone
    (Lin et al., "Common Diffusion Noise Schedules and Sample Steps are Flawed", 2023).
    """
    return DDIMScheduler(
        num_train_timesteps=1000,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
        timestep_spacing="trailing",
        prediction_type="v_prediction",
        rescale_betas_zero_snr=True,
    )


def write_clip_bpe_files(directory: Path) -> None:
    """Write ``vocab.json`` and ``merges.txt`` for open_clip's shipped BPE.

    The vocabulary is laid out exactly as open_clip's ``SimpleTokenizer`` builds it (bytes, bytes
    with ``</w>``, one entry per merge, then the two special tokens), so both tokenizers give the
    same ids; the specials get the names the Hugging Face CLIP tokenizer expects.
    """
    from open_clip.tokenizer import bytes_to_unicode, default_bpe

    with gzip.open(default_bpe()) as f:
        lines = f.read().decode("utf-8").split("\n")
    merges = lines[1 : 49152 - 256 - 2 + 1]
    byte_tokens = list(bytes_to_unicode().values())
    vocab = byte_tokens + [t + "</w>" for t in byte_tokens]
    vocab += ["".join(m.split()) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == VOCAB_SIZE, len(vocab)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")


def build_tokenizer(directory: Path) -> CLIPTokenizer:
    write_clip_bpe_files(directory)
    return CLIPTokenizer.from_pretrained(str(directory), model_max_length=CONTEXT_LENGTH)


def register_clip_config(config_path: Path) -> str:
    """Make ``config_path`` open_clip's ``shapes-clip`` config and return the model name.

    open_clip keeps configs in one process-wide table; training writes a config of its own, so
    this re-registers whenever the table holds a different one (v1 and v2 differ in size).
    """
    import open_clip

    wanted = json.loads(Path(config_path).read_text())
    if open_clip.get_model_config(CLIP_MODEL_NAME) != wanted:
        open_clip.add_model_config(config_path)
    return CLIP_MODEL_NAME
