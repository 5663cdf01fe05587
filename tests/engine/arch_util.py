"""Tiny random-weight SDXL, SD3 and Flux pipeline folders, built offline.

Each folder is what a team's own weights look like to the engine: diffusers components built
from small configs, saved with ``save_pretrained``, and loaded back through the registry's real
``from_pretrained`` path. Tokenizers need no download either: CLIP's comes from open_clip's
bundled BPE (:mod:`genloop.workers.engine.tokenizer`), T5's is a ``tokenizers`` word-level model
made here and wrapped in ``T5TokenizerFast``. Every model is a few hundred kilobytes, so a
64-pixel image takes well under a second on a CPU.
"""

from __future__ import annotations

from pathlib import Path

import torch

ARCHITECTURES = ("sdxl", "sd3", "flux")
#: The size each pipeline draws by default (its denoiser's sample size times the VAE's scale;
#: Flux's pipeline fixes 128 latent pixels whatever the config says). SD3 and Flux take 16
#: latent channels, as the real ones do (SD3's inpainting insists); Flux's transformer sees
#: them packed in 2x2 patches, 64 channels.
NATIVE_SIZE = {"sdxl": 64, "sd3": 64, "flux": 256}
_CLIP = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=77, projection_dim=32, hidden_act="gelu",
             bos_token_id=49406, eos_token_id=49407, pad_token_id=49407)


def t5_tokenizer():
    """A T5 tokenizer built in code: a unigram vocabulary of lower-case letters and a few
    words, with T5's special tokens (pad 0, eos 1, unk 2). Unigram, as T5's own: transformers
    rebuilds a T5 tokenizer's model as a unigram when it loads one."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import T5TokenizerFast

    words = ["<pad>", "</s>", "<unk>", *"abcdefghijklmnopqrstuvwxyz0123456789",
             "a", "red", "blue", "circle", "square", "cat", "dog", "hat", "on", "the", "in"]
    pieces = [(w, 0.0 if i < 3 else -float(len(w) == 1))
              for i, w in enumerate(dict.fromkeys(words))]
    tok = Tokenizer(models.Unigram(pieces, unk_id=2))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    return T5TokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                           unk_token="<unk>", extra_ids=0, model_max_length=32)


def _t5(vocab_size: int):
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(
        vocab_size=vocab_size, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=1))


def _vae(latent_channels: int, **extra):
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(16, 32), layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=latent_channels, norm_num_groups=8, sample_size=64, **extra)


def build_sdxl():
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    from genloop.workers.engine.tokenizer import VOCAB_SIZE, clip_tokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        layers_per_block=1, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(2, 4),
        use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 1), projection_class_embeddings_input_dim=80,
        cross_attention_dim=64, norm_num_groups=8)
    vae = _vae(4)
    config = CLIPTextConfig(vocab_size=VOCAB_SIZE, **_CLIP)
    return StableDiffusionXLPipeline(
        vae=vae, text_encoder=CLIPTextModel(config), tokenizer=clip_tokenizer(),
        text_encoder_2=CLIPTextModelWithProjection(config), tokenizer_2=clip_tokenizer(),
        unet=unet, scheduler=EulerDiscreteScheduler(
            beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
            timestep_spacing="leading", steps_offset=1),
        force_zeros_for_empty_prompt=True)


def build_sd3():
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    from genloop.workers.engine.tokenizer import VOCAB_SIZE, clip_tokenizer

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(
        sample_size=32, patch_size=1, in_channels=16, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, caption_projection_dim=32, joint_attention_dim=32,
        pooled_projection_dim=64, out_channels=16)
    config = CLIPTextConfig(vocab_size=VOCAB_SIZE, **_CLIP)
    tokenizer_3 = t5_tokenizer()
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=_vae(16, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609,
                 scaling_factor=1.5035),
        text_encoder=CLIPTextModelWithProjection(config), tokenizer=clip_tokenizer(),
        text_encoder_2=CLIPTextModelWithProjection(config), tokenizer_2=clip_tokenizer(),
        text_encoder_3=_t5(len(tokenizer_3)), tokenizer_3=tokenizer_3)


def build_flux():
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from genloop.workers.engine.tokenizer import VOCAB_SIZE, clip_tokenizer

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
        axes_dims_rope=(4, 4, 8))
    tokenizer_2 = t5_tokenizer()
    return FluxPipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=_vae(16, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609,
                 scaling_factor=1.5035),
        text_encoder=CLIPTextModel(CLIPTextConfig(vocab_size=VOCAB_SIZE, **_CLIP)),
        tokenizer=clip_tokenizer(), text_encoder_2=_t5(len(tokenizer_2)),
        tokenizer_2=tokenizer_2)


BUILDERS = {"sdxl": build_sdxl, "sd3": build_sd3, "flux": build_flux}


def save_pipeline(arch: str, folder: Path) -> Path:
    """Build ``arch``'s tiny pipeline and save it under ``folder / arch``; returns the path."""
    path = Path(folder) / arch
    BUILDERS[arch]().save_pretrained(path)
    return path
