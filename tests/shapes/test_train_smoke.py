"""The one retraining command, at smoke size: generator, mining, CLIP, then the evaluation, all
through the same loading paths as real weights; and it runs without genloop's service stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genloop import shapes

_STANDALONE = """
import sys
import genloop.shapes.training.train, genloop.shapes.training.evaluate
import genloop.shapes.training.estimate
service = {"dramatiq", "redis", "fastapi", "starlette", "uvicorn"}
# boto3 by genloop's S3 store only: accelerate (diffusers') imports it by itself when present
ours = {"genloop.workers.artifacts.s3", "genloop.gateway", "genloop.workers.pool.broker"}
print(sorted(({m.split(".")[0] for m in sys.modules} & service) | (set(sys.modules) & ours)))
"""


@pytest.mark.slow
def test_training_smoke_writes_loadable_models_and_figures(tmp_path: Path) -> None:
    import open_clip
    import torch
    from diffusers import StableDiffusionPipeline
    from PIL import Image

    from genloop.shapes.models import register_clip_config
    from genloop.shapes.training import evaluate, train

    threads = torch.get_num_threads()
    try:
        # When the smoke configuration retrains everything
        train.main(["--out", str(tmp_path), "--smoke", "--sequential"])
    finally:
        torch.set_num_threads(threads)
    report = json.loads((tmp_path / "train-report.json").read_text())
    assert set(report["seconds"]) >= {"generator+clip_clean", "mining", "clip_hard_negatives"}
    assert report["mined_images"] == 4
    assert not (tmp_path / ".stages").exists()
    # Then the pipeline loads with from_pretrained and samples at 64x64
    pipe = StableDiffusionPipeline.from_pretrained(str(tmp_path / "shapes-sd"))
    pipe.set_progress_bar_config(disable=True)
    image = pipe("a small blue square left of a large red star, white background",
                 num_inference_steps=2, generator=torch.Generator().manual_seed(0)).images[0]
    assert image.size == (64, 64)
    assert not (tmp_path / "shapes-sd" / "tokenizer" / "tokenizer.json").exists()
    # And the CLIP checkpoint loads through open_clip's pretrained= path
    name = register_clip_config(tmp_path / "shapes-clip" / "shapes-clip.json")
    model, _, preprocess = open_clip.create_model_and_transforms(
        name, pretrained=str(tmp_path / "shapes-clip" / "open_clip_model.safetensors"))
    pixels = preprocess(Image.new("RGB", (64, 64)))
    assert pixels.shape == (3, 64, 64)
    assert model.encode_image(pixels[None]).shape == (1, shapes.clip_config()["embed_dim"])
    # And the evaluation reports every figure, old CLIP beside the new one
    out = tmp_path / "figures.json"
    try:
        evaluate.main(["--weights", str(tmp_path), "--old-weights", str(shapes.weights_dir()),
                       "--n", "2", "--clip-n", "2", "--auc-prompts", "2", "--auc-images", "2",
                       "--steps", "2", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    figures = json.loads(out.read_text())
    assert {"one.colour", "two.relation", "two.order"} <= set(figures["clip"]["rank_first"])
    assert [g["prompts"] for g in figures["generator"]] == ["one", "two", "one-novel",
                                                            "two-novel"]
    assert [s["clip"] for s in figures["selection"]] == ["new", "old"]


def test_training_entry_points_import_no_service_dependencies() -> None:
    # When the training, evaluation and estimate modules are imported (as on a GPU box that
    # has torch but not genloop's service stack)
    proc = subprocess.run([sys.executable, "-c", _STANDALONE], capture_output=True,
                          text=True, timeout=120, check=False)
    # Then none of genloop's service stack comes with them
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_clip_only_retrains_the_verifier_against_the_generator_already_there(
        tmp_path: Path) -> None:
    import hashlib
    import shutil

    import torch

    from genloop.shapes.training import train

    shutil.copytree(shapes.weights_dir() / "shapes-sd", tmp_path / "shapes-sd")
    unet = tmp_path / "shapes-sd" / "unet" / "diffusion_pytorch_model.safetensors"
    before = hashlib.sha256(unet.read_bytes()).hexdigest()
    threads = torch.get_num_threads()
    try:
        # When only shapes-clip is retrained, at smoke size
        train.main(["--out", str(tmp_path), "--smoke", "--clip-only"])
    finally:
        torch.set_num_threads(threads)
    # Then the generator it mined is the one that was there, untouched
    assert hashlib.sha256(unet.read_bytes()).hexdigest() == before
    report = json.loads((tmp_path / "train-report.json").read_text())
    assert set(report["seconds"]) >= {"clip_clean", "mining", "clip_hard_negatives"}
    assert set(report["configs"]) == {"clip", "mining"}
    assert report["mined_images"] == 4
    assert (tmp_path / "shapes-clip" / "open_clip_model.safetensors").exists()


def test_clip_only_without_a_generator_says_where_to_put_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from genloop.shapes.training import train

    # When --clip-only finds no generator to mine
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path), "--smoke", "--clip-only"])
    # Then it says where one goes, and nothing was trained
    assert "copy one there" in capsys.readouterr().err
    assert not (tmp_path / "shapes-clip").exists()
