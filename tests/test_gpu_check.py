"""The GPU check's CPU-testable parts: its arguments, the wheel list, the section commands and
the benchmark shape tables, so the one scarce GPU run works the first time. (The whole check ran
here with ``--device cpu --tiny``; that takes minutes on a shared CPU, so CI checks the parts.)"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from benchmark_util import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def check():
    return load_benchmark("gpu_check")


def test_arguments_default_to_every_section_within_the_budget(check, monkeypatch):
    monkeypatch.setenv("OUT", "/tmp/out-dir")
    args = check.parse_args([])
    assert args.out == "/tmp/out-dir" and args.device == "cuda"
    assert args.only.split(",") == list(check.SECTIONS)
    # The sections' own limits fit the 8 minutes the check may take on an H200 (the lent
    # machine's 15 minutes also pay for its start and for one rerun of a failed section)
    assert sum(check.SECTIONS.values()) <= 8 * 60 - 20
    assert args.budget <= 8 * 60 - 20


@pytest.mark.parametrize("argv", [["--only", "env,bogus"], ["--budget", "0"]])
def test_bad_arguments_are_refused(check, argv):
    with pytest.raises(SystemExit):
        check.parse_args(argv)


def test_every_wheel_is_pinned_to_the_version_tested_here(check):
    for pin in check.WHEELS:
        name, _, version = pin.partition("==")
        assert version, f"{pin} is not pinned"
        assert importlib.metadata.version(name) == version, pin


def test_sections_run_compiled_kernels_on_a_gpu_and_only_the_kernel_conftest(check, tmp_path):
    args = check.parse_args(["--out", str(tmp_path)])
    env = check.section_env(args, "/farm")
    assert env["TRITON_INTERPRET"] == "0" and env["PYTHONPATH"].startswith("/farm")
    assert check.section_env(check.parse_args(["--device", "cpu"]), "")["TRITON_INTERPRET"] == "1"
    cmd = check.section_command("kernel_tests", args, tmp_path)
    assert any(a.startswith("--confcutdir=") and a.endswith("kernel_ops") for a in cmd)
    gen = check.section_command("generation", args, tmp_path)
    assert gen[gen.index("--device") + 1] == "cuda" and "shapes" in gen


def test_a_benchmarks_json_is_found_among_its_other_output(check):
    printed = ('loading {weights}\n{"skipped": 1}\n'
               '{"model": "shapes", "seconds": {"a": [1]}}\ndone\n')
    assert check.json_output(printed, 0, 70) == {"model": "shapes", "seconds": {"a": [1]}}


@pytest.mark.parametrize(("rc", "cause"), [("timeout", "timed out after 70s"), (1, "rc=1")])
def test_a_section_without_json_says_why(check, rc, cause):
    # The first H200 run said only "substring not found" when generation was cut off
    with pytest.raises(ValueError, match=cause):
        check.json_output("Loading pipeline components: 100%\n", rc, 70)


def test_the_checkout_becomes_importable_as_genloop(check, tmp_path):
    farm = Path(check.genloop_path(tmp_path))
    for name in ("sdk", "workers", "gateway", "kernels", "evaluators", "shapes"):
        assert (farm / "genloop" / name).resolve() == (BENCHMARKS.parent / name).resolve()


def test_benchmark_shapes_are_what_diffusers_runs():
    kernels = load_benchmark("kernel_speed")
    shapes = kernels.ATTENTION_SHAPES
    assert {s.head_dim for s in shapes} == {64, 128}
    assert any(s.kv_tokens == 77 for s in shapes)  # text cross-attention
    assert any(s.q_tokens % 128 for s in shapes)  # a ragged tail (joint image + text tokens)
    assert any(s.q_tokens >= 16384 for s in shapes)
    for _, c, _, _, groups in kernels.GROUPNORM_SHAPES:
        assert c % groups == 0
    assert kernels.VAE_GROUPNORM_SHAPES
