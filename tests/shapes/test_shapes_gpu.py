"""The one GPU command for shapes v2 (benchmarks/shapes_gpu.py), its CPU-testable parts: the
steps' command lines and the weights packed into parts the GPU tool can bring back."""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def gpu_run():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("_bench_shapes_gpu", BENCHMARKS / "shapes_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_run_trains_the_gpu_recipe_in_the_budget_and_compares_with_shipped_weights(
        gpu_run, tmp_path):
    args = gpu_run.parse_args(["--out", str(tmp_path), "--budget-seconds", "200"])
    default = gpu_run.parse_args(["--out", str(tmp_path)])
    commands = gpu_run.step_commands(args, tmp_path)
    assert list(commands) == ["train", "evaluate"]
    train, evaluate = commands["train"], commands["evaluate"]
    assert train[train.index("--recipe") + 1] == "gpu"
    assert train[train.index("--budget-seconds") + 1] == "200.0"
    assert train[train.index("--device") + 1] == "cuda"
    old = Path(evaluate[evaluate.index("--old-weights") + 1])
    assert (old / "shapes-sd" / "model_index.json").exists()
    # Even stopped at every step's limit, a default run ends inside the GPU tool's 10 minutes
    # a command (with a minute for installing the wheels)
    assert default.budget_seconds + gpu_run.TRAIN_SLACK_S + gpu_run.EVALUATE_S <= 9 * 60


def test_weights_come_back_in_parts_that_rebuild_the_folder(gpu_run, tmp_path):
    folder = tmp_path / "weights"
    (folder / "shapes-sd" / "unet").mkdir(parents=True)
    blob = bytes(range(256)) * 1000
    (folder / "shapes-sd" / "unet" / "model.safetensors").write_bytes(blob)
    (folder / "train-report.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    packed = gpu_run.pack(folder, out, part_bytes=100_000)
    parts = [out / p for p in packed["parts"]]
    assert len(parts) == 3 and all(p.stat().st_size <= 100_000 for p in parts)
    data = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile("weights/shapes-sd/unet/model.safetensors")
        assert member is not None and member.read() == blob
