"""The diffusers processor and hooks: a tiny UNet switched to the kernels and back.

PSNR bound for the UNet output (the predicted noise, treated as an image with the SDPA output's
range as peak): INT8 attention + fused GroupNorm/SiLU must stay >= 65 dB from the plain fp16
model. For scale, on this config: the plain fp16 model is 72 dB from the float32 one, and the
kernels measure 71 dB from plain fp16 (72 dB from float32), so INT8 costs about what fp16 itself
costs; 65 dB leaves a 2x margin in RMS error. A wiring bug (heads mixed up, SiLU applied twice, a
missed transpose) lands far below; the kernels' own precision is pinned down in
test_int8_attention.py and test_groupnorm_silu.py, not here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

# The kernels themselves need no diffusers; only these hooks do (their tests skip without it).
pytest.importorskip("diffusers")

from diffusers import UNet2DConditionModel  # noqa: E402
from diffusers.models.attention_processor import Attention, AttnProcessor2_0  # noqa: E402
from diffusers.models.resnet import ResnetBlock2D  # noqa: E402
from kernel_checks import psnr

import genloop.kernels as gk  # noqa: E402
from genloop.kernels import groupnorm_silu as gn_module  # noqa: E402
from genloop.kernels import int8_attention as attn_module  # noqa: E402

PSNR_BOUND_DB = 65.0


def _tiny_unet() -> UNet2DConditionModel:
    torch.manual_seed(0)
    # One head of 64 channels at the first level and of 128 in the mid block: both head dims
    # (several heads are covered by test_processor_matches_sdpa_processor_on_one_module).
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(64, 128),
        layers_per_block=1, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=64,
        attention_head_dim=1, norm_num_groups=2,
    ).eval()


def _count_calls(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_unet_with_kernels_stays_close_to_sdpa_and_switches_back(device, force, monkeypatch):
    # Given a tiny fp16 UNet and its plain output
    unet = _tiny_unet().to(device=device, dtype=torch.float16)
    g = torch.Generator().manual_seed(1)
    sample = torch.randn(1, 4, 8, 8, generator=g).to(device=device, dtype=torch.float16)
    text = torch.randn(1, 7, 64, generator=g).to(device=device, dtype=torch.float16)
    n_attention = sum(isinstance(m, Attention) for m in unet.modules())
    with torch.no_grad():
        plain = unet(sample, 10, text).sample

        # When both kernels are switched on
        assert gk.apply_int8_attention(unet, force=force) == n_attention
        # norm1 + norm2 of 8 ResNet blocks (2 down, 2 mid, 4 up) and conv_norm_out
        assert gk.apply_fused_groupnorm_silu(unet, force=force) == 17
        attention_calls = _count_calls(monkeypatch, attn_module, "int8_attention")
        groupnorm_calls = _count_calls(monkeypatch, gn_module, "groupnorm_silu")
        fused = unet(sample, 10, text).sample

        # Then every attention and every fused pair went through a kernel, and the output is
        # close to the plain one but not identical (INT8 rounding)
        assert len(attention_calls) == n_attention
        assert len(groupnorm_calls) == 17
        assert not torch.equal(fused, plain)
        assert psnr(fused, plain) >= PSNR_BOUND_DB

        # And switching off restores the plain model exactly
        assert gk.remove_int8_attention(unet) == n_attention
        assert gk.remove_fused_groupnorm_silu(unet) == 17
        assert torch.equal(unet(sample, 10, text).sample, plain)


def test_applying_twice_does_not_stack():
    unet = _tiny_unet()
    assert gk.apply_fused_groupnorm_silu(unet) == 17
    assert gk.apply_fused_groupnorm_silu(unet) == 0
    assert gk.apply_int8_attention(unet) > 0
    assert gk.apply_int8_attention(unet) == 0
    assert gk.remove_fused_groupnorm_silu(unet) == 17
    assert gk.remove_int8_attention(unet) > 0
    assert all(
        isinstance(m.processor, AttnProcessor2_0)
        for m in unet.modules() if isinstance(m, Attention)
    )


def test_off_by_default_on_cpu_changes_nothing():
    # Given a float16 attention module and ResNet block on CPU, switched on without force
    torch.manual_seed(0)
    attn = Attention(query_dim=128, heads=2, dim_head=64).half().eval()
    block = ResnetBlock2D(in_channels=32, out_channels=32, temb_channels=16, groups=4).eval()
    x = torch.randn(2, 50, 128).half()
    h, temb = torch.randn(2, 32, 6, 6), torch.randn(2, 16)
    with torch.no_grad():
        plain_attn, plain_block = attn(x), block(h, temb)
        gk.apply_int8_attention(attn)
        gk.apply_fused_groupnorm_silu(block)
        # Then the PyTorch path runs and gives the same numbers
        torch.testing.assert_close(attn(x), plain_attn, atol=0, rtol=0)
        torch.testing.assert_close(block(h, temb), plain_block, atol=0, rtol=0)


def test_attention_mask_falls_back_to_sdpa(force):
    torch.manual_seed(0)
    attn = Attention(query_dim=128, heads=2, dim_head=64).half().eval()
    x = torch.randn(1, 20, 128).half()
    mask = torch.ones(1, 20, dtype=torch.bool)
    mask[:, 15:] = False
    with torch.no_grad():
        plain = attn(x, attention_mask=mask)
        gk.apply_int8_attention(attn, force=force)
        torch.testing.assert_close(attn(x, attention_mask=mask), plain, atol=0, rtol=0)


@pytest.mark.parametrize("time_embedding_norm, fused", [("default", 2), ("scale_shift", 1)])
def test_resnet_block_fuses_only_norms_that_feed_silu(time_embedding_norm, fused, force):
    # Given a float32 ResNet block; with "scale_shift" a shift sits between norm2 and SiLU
    torch.manual_seed(0)
    block = ResnetBlock2D(
        in_channels=32, out_channels=48, temb_channels=16, groups=4,
        time_embedding_norm=time_embedding_norm,
    ).eval()
    h, temb = torch.randn(2, 32, 6, 6), torch.randn(2, 16)
    with torch.no_grad():
        plain = block(h, temb)
        # When it is switched to the kernel
        assert gk.apply_fused_groupnorm_silu(block, force=force) == fused
        out = block(h, temb)
    # Then only the pairs that are really GroupNorm -> SiLU are fused, and the time embedding
    # still goes through SiLU: the block computes what it did
    torch.testing.assert_close(out, plain, atol=1e-4, rtol=1e-4)


def test_processor_matches_sdpa_processor_on_one_module(device, force):
    torch.manual_seed(0)
    attn = Attention(query_dim=128, heads=2, dim_head=64, cross_attention_dim=32)
    attn = attn.to(device=device, dtype=torch.float16).eval()
    x = torch.randn(3, 70, 128).to(device=device, dtype=torch.float16)
    context = torch.randn(3, 9, 32).to(device=device, dtype=torch.float16)
    with torch.no_grad():
        plain = attn(x, encoder_hidden_states=context)
        attn.set_processor(gk.Int8AttnProcessor(attn.processor, force=force))
        out = attn(x, encoder_hidden_states=context)
    assert not torch.equal(out, plain)
    assert F.cosine_similarity(out.float().flatten(), plain.float().flatten(), dim=0) > 0.9998
