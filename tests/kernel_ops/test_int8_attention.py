"""INT8 attention kernel against the float32 reference and against its own algorithm in torch.

Tolerances, kernel output vs exact float32 attention (``ATTENTION_TOLERANCE``), for the inputs of
``_inputs``: q, v ~ N(0, 1) and k ~ N(0, 1) plus a per-channel offset ~ N(0, 4²) shared by all
tokens (the kind of offset diffusion models' K carries, which smoothing must remove):

    dtype      cosine >=   max |error| <=
    float16    0.9998      0.04
    bfloat16   0.9998      0.04

Why these numbers: rounding to INT8 leaves an error uniform in ±scale/2 per element, with
scale ≈ 4σ/127 for a Gaussian block, so each logit gets noise of std about
sm_scale · sqrt(2D) · σ² · (4/127) / sqrt(12) ≈ 0.013 (D = 64), i.e. about 1% relative noise on
each softmax weight. Over a few thousand outputs of magnitude ≲ 1 that puts the worst error
near 0.02 and the cosine near 0.9999, which is what the algorithm measures (the torch emulation
gives cos ≥ 0.99991, max error ≤ 0.022 over the shapes below and four seeds). The bounds leave
~2x room for that and for the output rounding to fp16/bf16 (the interpreter truncates bf16
instead of rounding to nearest: up to one ulp). A K scale 5% off, a wrong tail-block scale, or
a softmax base mix-up lands at cos ≤ 0.9995 and error ≥ 0.06: see ``test_broken_variant_fails``.

Kernel vs the torch emulation of the same algorithm (``EMULATION_TOLERANCE``) is tighter, since
only exp2 rounding, accumulation order and output rounding differ.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from genloop.kernels.references import attention_reference, int8_attention_emulated

ATTENTION_TOLERANCE = {torch.float16: (0.9998, 0.04), torch.bfloat16: (0.9998, 0.04)}
EMULATION_TOLERANCE = {torch.float16: (0.99999, 0.005), torch.bfloat16: (0.9999, 0.02)}

# (batch, heads, q tokens, kv tokens, head_dim): tokens are not multiples of the 128 x 64 tiles,
# cross-attention shapes (77 text tokens) included; small enough for the interpreter.
SHAPES = [
    (1, 2, 77, 77, 64),
    (3, 1, 200, 130, 128),
    (1, 1, 33, 17, 64),
    (3, 2, 65, 150, 128),
    (1, 1, 129, 77, 64),
]
DTYPES = [torch.float16, torch.bfloat16]


def _inputs(shape, dtype, device, seed=0, k_offset=4.0):
    batch, heads, n_q, n_kv, head_dim = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n_q, head_dim, generator=g)
    k = torch.randn(batch, heads, n_kv, head_dim, generator=g)
    k = k + k_offset * torch.randn(1, 1, 1, head_dim, generator=g)
    v = torch.randn(batch, heads, n_kv, head_dim, generator=g)
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


def attention_problems(out, ref, tolerance):
    """What is wrong with ``out`` against ``ref`` (empty when it is within ``tolerance``)."""
    min_cos, max_err = tolerance
    out, ref = out.float().cpu(), ref.float().cpu()
    cos = F.cosine_similarity(out.flatten(), ref.flatten(), dim=0).item()
    err = (out - ref).abs().max().item()
    problems = []
    if not cos >= min_cos:
        problems.append(f"cosine {cos:.6f} < {min_cos}")
    if not err <= max_err:
        problems.append(f"max abs error {err:.4f} > {max_err}")
    return problems


def _run_quantized(q, k, v, *, k_scale_fn=None, q_multiplier=None, smooth=True):
    """The wrapper's steps, with a hook to break the scales the way a bug would."""
    from genloop.kernels import int8_attention as ia

    block_m, block_n, _, _ = ia._CONFIGS[q.shape[-1]]
    sm_scale = 1.0 / math.sqrt(q.shape[-1])
    multiplier = sm_scale * ia.LOG2E if q_multiplier is None else q_multiplier
    q_i8, q_scale, k_i8, k_scale = ia.quantize_qk(
        q, k, block_m=block_m, block_n=block_n, q_multiplier=multiplier, smooth_k=smooth)
    if k_scale_fn is not None:
        k_scale = k_scale_fn(k_scale).contiguous()
    return ia.int8_attention_quantized(
        q_i8, q_scale, k_i8, k_scale, v, block_m=block_m, block_n=block_n
    )


def test_quantize_qk_matches_the_reference_quantizer(device):
    from genloop.kernels import int8_attention as ia
    from genloop.kernels.references import quantize_per_block_reference

    # Given K with a channel offset and more keys than one program's chunk of blocks (the mean
    # must cover every chunk), and Q in a transposed (B, N, H, D) layout
    n_kv = 64 * ia.K_BLOCKS_PER_PROGRAM + 70
    q, k, _ = _inputs((1, 2, 130, n_kv, 64), torch.float16, device)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)
    # When both are quantized in one launch
    q_i8, q_scale, k_i8, k_scale = ia.quantize_qk(q, k, block_m=128, block_n=64,
                                                  q_multiplier=0.3)
    # Then they match quantizing Q and (K - its mean over all tokens) block by block in torch,
    # up to the odd element that float32 rounding (the mean's summation order, the multiplier's
    # product) puts on the other side of a .5
    want_q, want_q_scale = quantize_per_block_reference(q.cpu(), 128, multiplier=0.3)
    k_smooth = k.cpu().float() - k.cpu().float().mean(dim=2, keepdim=True)
    want_k, want_k_scale = quantize_per_block_reference(k_smooth, 64)
    for got, want in ((q_i8, want_q), (k_i8, want_k)):
        assert (got.cpu().int() - want.int()).abs().max() <= 1
        assert (got.cpu() != want).float().mean() < 1e-3
    torch.testing.assert_close(q_scale.cpu(), want_q_scale, rtol=1e-5, atol=0)
    torch.testing.assert_close(k_scale.cpu(), want_k_scale, rtol=1e-5, atol=0)
    assert k_scale.shape == (1, 2, ia.K_BLOCKS_PER_PROGRAM + 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_float32_reference(shape, dtype, device):
    from genloop.kernels.int8_attention import int8_attention

    q, k, v = _inputs(shape, dtype, device)
    out = int8_attention(q, k, v)
    assert out.dtype == dtype and out.shape == q.shape
    assert attention_problems(out, attention_reference(q, k, v), ATTENTION_TOLERANCE[dtype]) == []


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES[:3], ids=str)
def test_matches_torch_emulation_of_the_algorithm(shape, dtype, device):
    from genloop.kernels.int8_attention import _CONFIGS, int8_attention

    q, k, v = _inputs(shape, dtype, device, seed=1)
    block_m, block_n, _, _ = _CONFIGS[shape[-1]]
    emulated = int8_attention_emulated(q, k, v, block_m=block_m, block_n=block_n)
    assert attention_problems(int8_attention(q, k, v), emulated, EMULATION_TOLERANCE[dtype]) == []


BROKEN = {
    "k_scale_5_percent_high": {"k_scale_fn": lambda s: s * 1.05},
    "tail_block_uses_first_block_scale": {
        "k_scale_fn": lambda s: torch.cat([s[..., :-1], s[..., :1]], dim=-1)
    },
    "softmax_base_e_instead_of_2": {"q_multiplier": 1.0 / 8.0},
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bug", sorted(BROKEN))
def test_broken_variant_fails(bug, dtype, device):
    # Given inputs with three key blocks, the last one partial
    shape = (1, 2, 77, 150, 64)
    q, k, v = _inputs(shape, dtype, device)
    ref = attention_reference(q, k, v)
    # When the pipeline runs correctly, and then with one scale broken
    good = _run_quantized(q, k, v)
    broken = _run_quantized(q, k, v, **BROKEN[bug])
    # Then the same check passes the first and fails the second
    assert attention_problems(good, ref, ATTENTION_TOLERANCE[dtype]) == []
    assert attention_problems(broken, ref, ATTENTION_TOLERANCE[dtype]) != []


def test_smoothing_k_is_what_keeps_a_large_offset_accurate(device):
    # Given K whose channels carry an offset 20x their spread
    q, k, v = _inputs((1, 2, 77, 150, 64), torch.float16, device, k_offset=20.0)
    ref = attention_reference(q, k, v)
    # Then per-block INT8 passes only with the mean subtracted
    tolerance = ATTENTION_TOLERANCE[torch.float16]
    assert attention_problems(_run_quantized(q, k, v), ref, tolerance) == []
    unsmoothed = _run_quantized(q, k, v, smooth=False)
    assert attention_problems(unsmoothed, ref, ATTENTION_TOLERANCE[torch.float16]) != []


def test_takes_transposed_views_and_keeps_their_layout(device):
    # Given (B, N, H, D) projections viewed as (B, H, N, D), as diffusers' processors make them
    q, k, v = _inputs((2, 3, 70, 70, 64), torch.float16, device)
    qv, kv, vv = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not qv.is_contiguous()
    from genloop.kernels.int8_attention import int8_attention

    out = int8_attention(qv, kv, vv)
    # Then the result equals the contiguous run and comes back in the same layout
    torch.testing.assert_close(out, int8_attention(q, k, v), atol=0, rtol=0)
    assert out.stride() == qv.stride()


def test_custom_sm_scale(device):
    from genloop.kernels.int8_attention import int8_attention

    q, k, v = _inputs((1, 1, 40, 40, 128), torch.float16, device)
    out = int8_attention(q, k, v, sm_scale=0.05)
    ref = attention_reference(q, k, v, sm_scale=0.05)
    assert attention_problems(out, ref, ATTENTION_TOLERANCE[torch.float16]) == []


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda q, k, v: (q.float(), k.float(), v.float()), "float16 or bfloat16"),
        (lambda q, k, v: (q[..., :48], k[..., :48], v[..., :48]), "head_dim"),
        (lambda q, k, v: (q, k[:, :, :10], v), "shapes do not match"),
        (lambda q, k, v: (q.transpose(2, 3), k, v), "contiguous in head_dim"),
        (lambda q, k, v: (q, k.bfloat16(), v), "share a dtype"),
        (lambda q, k, v: (q[0], k[0], v[0]), "(batch, heads, tokens, head_dim)"),
    ],
)
def test_launcher_rejects_what_it_does_not_take(change, message, device):
    from genloop.kernels.errors import KernelInputError
    from genloop.kernels.int8_attention import int8_attention

    q, k, v = _inputs((1, 1, 64, 64, 64), torch.float16, device)
    with pytest.raises(KernelInputError, match=re.escape(message)):
        int8_attention(*change(q, k, v))
