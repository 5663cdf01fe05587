"""Fused GroupNorm + SiLU against ``silu(group_norm(x))`` computed in float32.

Tolerances (atol, rtol), kernel vs the float32 reference on the same low-precision input:

    dtype      atol    rtol     why
    float32    1e-5    1e-5     statistics in float32 either way; only summation order differs
    float16    1e-3    1e-3     output rounding: half an fp16 ulp is 2^-11 ≈ 4.9e-4 relative
    bfloat16   1e-3    8e-3     one bf16 ulp is 2^-7 ≈ 7.8e-3 relative; Triton's interpreter
                                truncates float32 -> bf16 instead of rounding to nearest, so a
                                full ulp, where a GPU would be at half

The statistics and the affine + SiLU are float32 inside the kernel, so the output rounding is the
only low-precision step; that is why the fp16 and bf16 bounds sit on one rounding and no more.
``test_tolerance_bites`` shows that a plausible statistics bug (chunk variances merged without
the spread of the chunk means) would fail them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genloop.kernels.references import groupnorm_silu_reference

TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-3, 8e-3),
}
DTYPES = list(TOLERANCE)

# (N, C, H, W, groups): one and several chunks per group (BLOCK_HW = 4096 / next_pow2(C/G)),
# channels per group 2, 4, 10 (not a power of two) and 6 (a single group), odd spatial sizes;
# each through both paths (one program per group, or chunks + finalize + apply).
SHAPES = [
    (1, 16, 50, 50, 8),
    (3, 32, 9, 7, 8),
    (1, 40, 20, 15, 4),
    (2, 6, 5, 5, 1),
]


def _inputs(shape, dtype, device, *, affine=True, seed=0):
    n, c, h, w, _ = shape
    g = torch.Generator().manual_seed(seed)
    # A mean far from zero against the spread exercises the variance's cancellation, and a
    # spatial ramp (real activations have structure) makes chunk means differ, so merging chunk
    # statistics wrongly shows.
    ramp = torch.linspace(-2.0, 2.0, h * w).reshape(1, 1, h, w)
    x = torch.randn(n, c, h, w, generator=g) * 2.0 + 3.0 + ramp
    weight = torch.randn(c, generator=g) if affine else None
    bias = torch.randn(c, generator=g) if affine else None
    to = {"device": device, "dtype": dtype}
    return (
        x.to(**to),
        None if weight is None else weight.to(**to),
        None if bias is None else bias.to(**to),
    )


@pytest.mark.parametrize("path", ["group", "chunked"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_float32_reference(shape, dtype, layout, path, device):
    from genloop.kernels.groupnorm_silu import groupnorm_silu

    x, weight, bias = _inputs(shape, dtype, device, affine=shape[1] != 6)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    out = groupnorm_silu(x, shape[4], weight, bias, eps=1e-6, path=path)
    assert out.dtype == dtype
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    assert out.is_contiguous(memory_format=memory_format)
    ref = groupnorm_silu_reference(x, shape[4], weight, bias, eps=1e-6)
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), ref, atol=atol, rtol=rtol)


def _forgot_between_chunk_variance(x, groups, weight, bias, block_hw, eps=1e-5):
    """The reference with the bug a chunked kernel invites: merging chunk variances without the
    spread of the chunk means (Chan's ``n_a n_b / n · (mean_a - mean_b)²`` term)."""
    n, c, h, w = x.shape
    xg = x.float().reshape(n, groups, c // groups, h * w)
    mean = xg.mean(dim=(2, 3), keepdim=True)
    m2 = sum(
        ((chunk - chunk.mean(dim=(2, 3), keepdim=True)) ** 2).sum(dim=(2, 3), keepdim=True)
        for chunk in xg.split(block_hw, dim=3)
    )
    y = ((xg - mean) / torch.sqrt(m2 / xg[0, 0].numel() + eps)).reshape(x.shape)
    return F.silu(y * weight.float()[:, None, None] + bias.float()[:, None, None])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tolerance_bites(dtype, device):
    # Given the reference, and the same math with chunk statistics merged wrongly
    shape = (1, 40, 20, 15, 4)  # 10 channels per group -> 256-pixel chunks, 2 per group
    x, weight, bias = _inputs(shape, dtype, device)
    ref = groupnorm_silu_reference(x, 4, weight, bias)
    broken = _forgot_between_chunk_variance(x, 4, weight, bias, block_hw=256)
    # Then the tolerance used above tells them apart
    atol, rtol = TOLERANCE[dtype]
    with pytest.raises(AssertionError):
        torch.testing.assert_close(broken, ref, atol=atol, rtol=rtol)


def test_rejects_other_layouts_and_bad_groups(device):
    from genloop.kernels.errors import KernelInputError
    from genloop.kernels.groupnorm_silu import groupnorm_silu

    x, weight, bias = _inputs((1, 16, 8, 8, 4), torch.float16, device)
    with pytest.raises(KernelInputError, match="channels-last"):
        groupnorm_silu(x.transpose(2, 3), 4, weight, bias)
    with pytest.raises(KernelInputError, match="multiple of num_groups"):
        groupnorm_silu(x, 5, weight, bias)
    with pytest.raises(KernelInputError, match="both weight and bias"):
        groupnorm_silu(x, 4, weight, None)
