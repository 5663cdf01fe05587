"""Dispatch: the kernels run only where they can, PyTorch runs everywhere else."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch
import torch.nn.functional as F

import genloop.kernels as gk


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


def test_kernels_import_without_the_sdk_and_compile_unless_told_to_interpret():
    # Given a Python without pydantic (the GPU image) and TRITON_INTERPRET unset
    script = textwrap.dedent(
        """
        import sys
        sys.modules["pydantic"] = None
        from genloop.kernels import dispatch, errors, groupnorm_silu, int8_attention
        assert issubclass(errors.KernelInputError, ValueError)
        print(int8_attention.RUNS_IN_INTERPRETER, groupnorm_silu.RUNS_IN_INTERPRETER)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    # Then the kernel modules import, built for the GPU compiler, not the interpreter
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_short_key_sequences_take_sdpa_on_a_gpu_unless_forced(monkeypatch):
    from genloop.kernels import dispatch

    # Given a device the kernel can run on (pretended: this check is about the shapes)
    monkeypatch.setattr(dispatch, "_device_blocker", lambda *args: None)
    q = torch.randn(1, 2, 4096, 64).half()
    cross = torch.randn(1, 2, 77, 64).half()
    long_kv = torch.randn(1, 2, dispatch.INT8_ATTENTION_MIN_KV_TOKENS, 64).half()
    # Then cross-attention's 77 text tokens go to SDPA, long self-attention to the kernel
    assert "77 keys" in dispatch.int8_attention_blocker(q, cross, cross)
    assert dispatch.int8_attention_blocker(q, long_kv, long_kv) is None
    # And force runs the kernel on short sequences too (tests, the GPU check)
    assert dispatch.int8_attention_blocker(q, cross, cross, force=True) is None


def test_launches_are_made_on_the_tensors_device():
    from genloop.kernels.launch import on_device

    # A CUDA tensor's launch makes its own device current (built without touching CUDA here)
    guard = on_device(torch.device("cuda", 1))
    assert isinstance(guard, torch.cuda.device) and guard.idx == 1
    # A CPU tensor (the interpreter) changes nothing
    with on_device(torch.device("cpu")):
        pass


def test_hopper_keeps_sdpa_cudnn_attention(monkeypatch):
    from genloop.kernels import dispatch

    # Given GPUs of two generations (the capability is what the rule reads)
    capability = {"value": (9, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability["value"])
    # Then Hopper keeps SDPA (cuDNN attention beat the kernel at every measured shape)
    assert dispatch.sdpa_beats_int8(torch.device("cuda"))
    # And an Ampere GPU, or any CPU tensor, is left to the shape rules
    capability["value"] = (8, 0)
    assert not dispatch.sdpa_beats_int8(torch.device("cuda"))
    assert not dispatch.sdpa_beats_int8(torch.device("cpu"))


def test_the_blocker_applies_the_hopper_rule_unless_forced(monkeypatch):
    from genloop.kernels import dispatch

    # Given a device the kernel runs on where SDPA's cuDNN attention wins (pretended)
    monkeypatch.setattr(dispatch, "_device_blocker", lambda *args: None)
    monkeypatch.setattr(dispatch, "sdpa_beats_int8", lambda device: True)
    q = torch.randn(1, 2, 64, 64).half()
    long_kv = torch.randn(1, 2, dispatch.INT8_ATTENTION_MIN_KV_TOKENS, 64).half()
    # Then even long self-attention stays on SDPA, and force still runs the kernel
    assert "cuDNN" in dispatch.int8_attention_blocker(q, long_kv, long_kv)
    assert dispatch.int8_attention_blocker(q, long_kv, long_kv, force=True) is None
