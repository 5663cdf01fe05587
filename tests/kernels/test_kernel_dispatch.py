"""Dispatch: the kernels run only where they can, PyTorch runs everywhere else."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import genloop.kernels as gk
import pytest
import torch
import torch.nn.functional as F


def _qkv(shape=(1, 2, 40, 64), dtype=torch.float16, device="cpu"):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(shape, generator=g).to(device=device, dtype=dtype) for _ in range(3))


def test_all_names_resolve_to_functions_or_classes():
    assert sorted(gk.__all__) == sorted(gk._EXPORTS)
    for name in gk.__all__:
        value = getattr(gk, name)
        assert not isinstance(value, types.ModuleType), name
        assert callable(value), name


def test_cpu_tensors_take_the_torch_path_by_default():
    # Given supported shapes on CPU, without force
    q, k, v = _qkv()
    x = torch.randn(1, 8, 4, 4).half()
    assert not gk.can_use_int8_attention(q, k, v)
    assert not gk.can_use_groupnorm_silu(x, 4)
    # Then the results are PyTorch's, bit for bit
    assert torch.equal(gk.int8_attention_or_sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v))
    assert torch.equal(gk.groupnorm_silu_or_torch(x, 4), F.silu(F.group_norm(x, 4)))


def test_force_runs_the_kernel_where_the_interpreter_can(device, force):
    q, k, v = _qkv(device=device)
    assert gk.can_use_int8_attention(q, k, v, force=force)
    out = gk.int8_attention_or_sdpa(q, k, v, force=force)
    sdpa = F.scaled_dot_product_attention(q, k, v)
    # INT8 rounding makes it differ from SDPA, a little.
    assert not torch.equal(out, sdpa)
    torch.testing.assert_close(out, sdpa, atol=0.05, rtol=0.0)


UNSUPPORTED_ATTENTION = {
    "float32": lambda q, k, v: ((q.float(), k.float(), v.float()), {}),
    "head_dim_80": lambda q, k, v: ((torch.cat([q, q[..., :16]], -1),
                                     torch.cat([k, k[..., :16]], -1),
                                     torch.cat([v, v[..., :16]], -1)), {}),
    "attention_mask": lambda q, k, v: ((q, k, v), {"attn_mask": torch.ones(40, 40, dtype=bool)}),
    "three_dims": lambda q, k, v: ((q[0], k[0], v[0]), {}),
    "needs_grad": lambda q, k, v: ((q.clone().requires_grad_(), k, v), {}),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED_ATTENTION))
def test_unsupported_attention_inputs_fall_back_even_when_forced(case):
    (q, k, v), kwargs = UNSUPPORTED_ATTENTION[case](*_qkv())
    assert not gk.can_use_int8_attention(q, k, v, force=True, **kwargs)
    out = gk.int8_attention_or_sdpa(q, k, v, force=True, **kwargs)
    mask = kwargs.get("attn_mask")
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_unsupported_groupnorm_inputs_fall_back_even_when_forced():
    x = torch.randn(1, 8, 4, 4).half()
    odd_layout = x.transpose(2, 3)
    assert not gk.can_use_groupnorm_silu(odd_layout, 4, force=True)
    assert torch.equal(
        gk.groupnorm_silu_or_torch(odd_layout, 4, force=True), F.silu(F.group_norm(odd_layout, 4))
    )
    assert not gk.can_use_groupnorm_silu(x[0], 4, force=True)  # (C, H, W): no batch dimension


def test_package_works_without_triton():
    # Given a Python where importing triton fails
    script = textwrap.dedent(
        """
        import sys
        sys.modules["triton"] = None
        import torch, torch.nn.functional as F
        import genloop.kernels as gk
        assert not gk.triton_available()
        q = torch.randn(1, 2, 10, 64).half()
        assert not gk.can_use_int8_attention(q, q, q, force=True)
        assert torch.equal(gk.int8_attention_or_sdpa(q, q, q, force=True),
                           F.scaled_dot_product_attention(q, q, q))
        x = torch.randn(1, 8, 4, 4)
        assert torch.equal(gk.groupnorm_silu_or_torch(x, 4, force=True),
                           F.silu(F.group_norm(x, 4)))
        print("ok")
        """
    )
    # Then the package imports and dispatch takes the PyTorch path
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
