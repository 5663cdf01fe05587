"""Shared fixtures: small real models (open_clip and transformers CLIP) built offline, and images.

Models are session-scoped because building them is the slow part; tests that count encodes make
their own evaluator so that counters start at zero.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from genloop.evaluators import EvaluatorRegistry, OpenClipEvaluator
from genloop.evaluators.registry import register_builtins

COLOURS = ["red", "blue", "white", "black", "green", "yellow"]


@pytest.fixture(scope="session")
def images() -> list[Image.Image]:
    """Six plain colours and two noise images, of sizes unlike any model's input size."""
    rng = np.random.default_rng(0)
    plain = [Image.new("RGB", (48 + i, 40), c) for i, c in enumerate(COLOURS)]
    noise = [Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)) for _ in range(2)]
    return plain + noise


@pytest.fixture(scope="session")
def clip_judge() -> OpenClipEvaluator:
    return OpenClipEvaluator("tiny-clip-v1", device="cpu")


@pytest.fixture
def registry() -> EvaluatorRegistry:
    """A registry of its own, so tests never leave names behind in the default one."""
    return register_builtins(EvaluatorRegistry())


def write_clip_tokenizer_files(folder: Path) -> tuple[Path, Path]:
    """vocab.json and merges.txt for transformers' CLIPTokenizer, from open_clip's shipped BPE.

    open_clip's SimpleTokenizer builds its vocabulary from ``bpe_simple_vocab_16e6.txt.gz``
    (byte tokens, their end-of-word forms, then one token per merge, then the two specials); the
    same table in Hugging Face's format only renames the specials.
    """
    from open_clip.tokenizer import SimpleTokenizer

    simple = SimpleTokenizer()
    renamed = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {renamed.get(token, token): index for token, index in simple.encoder.items()}
    merges = sorted(simple.bpe_ranks, key=simple.bpe_ranks.__getitem__)
    vocab_file, merges_file = folder / "vocab.json", folder / "merges.txt"
    vocab_file.write_text(json.dumps(vocab))
    merges_file.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return vocab_file, merges_file


@pytest.fixture(scope="session")
def hf_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random, tiny transformers CLIPModel and its CLIPProcessor, saved like a real judge.

    Seed 2 gives a mix of positive and negative cosines on the ``images`` fixture, so the
    comparison with torchmetrics exercises both the score and the clamp.
    """
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        CLIPProcessor,
        CLIPTokenizer,
    )

    folder = tmp_path_factory.mktemp("hf-clip-tiny")
    vocab_file, merges_file = write_clip_tokenizer_files(tmp_path_factory.mktemp("bpe"))
    tokenizer = CLIPTokenizer(str(vocab_file), str(merges_file), model_max_length=77)
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    config = CLIPConfig(
        text_config={
            "vocab_size": 49408,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
        },
        vision_config={
            "image_size": 32,
            "patch_size": 8,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
        },
        projection_dim=16,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        model = CLIPModel(config).eval()
    model.save_pretrained(folder)
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder
