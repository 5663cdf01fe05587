"""Models by name: built-ins, local diffusers directories through from_pretrained, and clear
``Permanent`` errors for what is not there (nothing is ever downloaded)."""

from __future__ import annotations

import os
import shutil

import pytest

from genloop.sdk import Graph, Permanent, RunStatus
from genloop.workers.engine.registry import ModelRegistry


def test_unknown_model_fails_at_once_without_retries(client):
    g = Graph()
    g.generate("a cat", n=1, model="nobody/no-such-model", max_retries=3)

    run = client.submit(g)
    result = run.wait(timeout=60)

    assert result.status == RunStatus.FAILED
    (failure,) = result.failures
    assert failure.error_type == "Permanent" and failure.attempts == 1
    assert "no-such-model" in failure.message and "download" in failure.message
    assert not [e for e in run.events(follow=False) if e.type == "instance.retry"]


def test_a_local_pipeline_directory_loads_through_from_pretrained(tmp_path, resources):
    directory = tmp_path / "my-model"
    resources.models.pipeline("tiny").save_pretrained(directory)
    registry = ModelRegistry(device="cpu")

    identity = registry.identity(str(directory))
    pipe = registry.pipeline(str(directory))

    assert identity.startswith("path:")
    assert type(pipe).__name__ == "StableDiffusionPipeline"
    index = directory / "model_index.json"
    index.write_text(index.read_text() + " ")
    assert registry.identity(str(directory)) != identity  # changed files, new result keys


def test_two_checkouts_of_the_same_weights_have_one_identity(tmp_path, resources):
    """Identity comes from contents, so two hosts (or two checkouts) share result keys."""
    first, second = tmp_path / "a" / "weights", tmp_path / "b" / "elsewhere"
    resources.models.pipeline("tiny").save_pretrained(first)
    shutil.copytree(first, second)  # new inodes and mtimes, same bytes
    for f in second.rglob("*"):
        os.utime(f, (1_000_000, 1_000_000))
    registry = ModelRegistry(device="cpu")

    assert registry.identity(str(first)) == registry.identity(str(second))
    assert registry.identity(str(first)) == ModelRegistry(device="cpu").identity(str(second))


def test_unknown_name_has_no_identity():
    with pytest.raises(Permanent, match="not a built-in model"):
        ModelRegistry(device="cpu").identity("nobody/no-such-model")
