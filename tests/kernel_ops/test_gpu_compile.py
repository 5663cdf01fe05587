"""The kernels compile for Hopper (sm_90a) with the instructions and register budget they were
designed for, checked without a GPU: Triton compiles ahead of time for a named target, and its
bundled ptxas reports registers and spills. The interpreter tests check the math; this checks
what the interpreter cannot (that the GPU compiler accepts the kernels, int8 wgmma is used,
and integer arguments equal to 1, which Triton turns into constants, still compile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

# The INT8 attention kernel may spill a few bytes at D = 128 (8 today); a jump past this means a
# Triton upgrade or an edit changed the register picture, and the block sizes need a new look.
MAX_SPILL_BYTES = 64

SCRIPT = textwrap.dedent(
    """
    import json, os, re, subprocess, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from genloop.kernels import groupnorm_silu as gn, int8_attention as ia

    TARGET = GPUTarget("cuda", 90, 32)
    PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")

    def build(fn, signature, constexprs, **options):
        for name, value in constexprs.items():
            signature[name] = "constexpr"
        src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        return triton.compile(src, target=TARGET, options=options)

    def spills(kernel, name):
        path = os.path.join(sys.argv[1], name + ".ptx")
        with open(path, "w") as f:
            f.write(kernel.asm["ptx"])
        err = subprocess.run([PTXAS, "-v", "--gpu-name=sm_90a", path, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
        return int(re.search(r"(\\d+) bytes spill stores", err).group(1))

    ints = "n_q n_kv n_heads n_q_blocks n_kv_blocks stride_vb stride_vh stride_vn"
    ints += " stride_ob stride_oh stride_on"
    out = {}
    for head_dim, dtype in ((64, "fp16"), (128, "bf16")):
        block_m, block_n, warps, stages = ia._CONFIGS[head_dim]
        sig = {"q_ptr": "*i8", "q_scale_ptr": "*fp32", "k_ptr": "*i8", "k_scale_ptr": "*fp32",
               "v_ptr": "*" + dtype, "o_ptr": "*" + dtype, **{n: "i32" for n in ints.split()}}
        k = build(ia._int8_attn_fwd_kernel, sig, {"D": head_dim, "BLOCK_M": block_m,
                  "BLOCK_N": block_n, "UPCAST_PV": False}, num_warps=warps, num_stages=stages)
        wgmma = sorted({line.split()[0] for line in k.asm["ptx"].splitlines()
                        if line.strip().startswith("wgmma.mma_async")})
        out[f"attention_d{head_dim}"] = {"wgmma": wgmma, "spill": spills(k, f"attn{head_dim}")}
    ints = "n_q n_heads n_q_blocks n_kv_blocks stride_qb stride_qh stride_qn stride_kb"
    ints += " stride_kh stride_kn"
    sig = {"q_ptr": "*fp16", "k_ptr": "*fp16", "q_out_ptr": "*i8", "k_out_ptr": "*i8",
           "q_scale_ptr": "*fp32", "k_scale_ptr": "*fp32", **{n: "i32" for n in ints.split()},
           "q_multiplier": "fp32"}
    build(ia._quantize_qk_kernel, sig, {"n_kv": 1, "D": 128, "BLOCK_M": 128, "BLOCK_N": 64,
          "K_BLOCKS": ia.K_BLOCKS_PER_PROGRAM, "SMOOTH_K": True}, num_warps=4)
    # A 1x1 image: hw == 1 and a single chunk become constants at launch.
    common = {"hw": 1, "n_chunks": 1, "CG": 10, "BLOCK_C": 16, "BLOCK_HW": 256}
    sig = {"x_ptr": "*bf16", "mean_ptr": "*fp32", "m2_ptr": "*fp32", "groups": "i32",
           "stride_n": "i32", "stride_c": "i32", "stride_hw": "i32"}
    build(gn._chunk_stats_kernel, sig, dict(common), num_warps=4)
    build(gn._finalize_kernel, {"mean_ptr": "*fp32", "m2_ptr": "*fp32", "out_ptr": "*fp32",
          "eps": "fp32"}, {"hw": 1, "n_chunks": 1, "CG": 10, "BLOCK_HW": 256, "CHUNKS_P2": 1},
          num_warps=4)
    sig = {"x_ptr": "*bf16", "y_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16",
           "stats_ptr": "*fp32", "groups": "i32", "stride_n": "i32", "stride_c": "i32",
           "stride_hw": "i32"}
    build(gn._apply_kernel, sig, {"hw": 1, "CG": 10, "BLOCK_C": 16, "BLOCK_HW": 256,
          "AFFINE": True}, num_warps=4)
    sig = {"x_ptr": "*fp16", "y_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp16",
           "hw": "i32", "groups": "i32", "eps": "fp32", "stride_n": "i32", "stride_c": "i32",
           "stride_hw": "i32"}
    group = build(gn._group_kernel, sig, {"CG": 40, "BLOCK_C": 64, "BLOCK_HW": 64,
                  "AFFINE": True}, num_warps=4)
    out["groupnorm_group_spill"] = spills(group, "gn_group")
    out["groupnorm"] = "ok"
    print(json.dumps(out))
    """
)


def test_kernels_compile_for_hopper_with_int8_wgmma(tmp_path):
    triton = pytest.importorskip("triton")
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("this Triton build has no NVIDIA backend (ptxas)")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    d64, d128 = result["attention_d64"], result["attention_d128"]
    assert any(".s32.s8.s8" in op for op in d64["wgmma"]), d64
    assert any(".f32.f16.f16" in op for op in d64["wgmma"]), d64
    assert any(".s32.s8.s8" in op for op in d128["wgmma"]), d128
    assert any(".f32.bf16.bf16" in op for op in d128["wgmma"]), d128
    assert d64["spill"] == 0
    assert d128["spill"] <= MAX_SPILL_BYTES
    assert result["groupnorm"] == "ok"
    assert result["groupnorm_group_spill"] == 0
