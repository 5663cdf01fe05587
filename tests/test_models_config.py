"""The operator's models config: read from a file, and the only names a worker will load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genloop.sdk import Client, Graph, Permanent
from genloop.workers.models_config import ModelsConfig, ModelsConfigError


def write_config(tmp_path: Path) -> Path:
    (tmp_path / "weights" / "house").mkdir(parents=True)
    (tmp_path / "weights" / "house" / "model_index.json").write_text("{}")
    config = tmp_path / "models.toml"
    config.write_text('[models.house]\nsource = "./weights/house"\nsteps = 12\nwidth = 256\n')
    return config


def test_a_toml_config_resolves_relative_sources_next_to_it(tmp_path):
    config = ModelsConfig.load(write_config(tmp_path))
    assert config.models["house"].source == str((tmp_path / "weights" / "house").resolve())
    assert config.names() == ["house", "shapes", "tiny"]
    assert config.allows("tiny") and config.allows("house") and not config.allows("/etc")


def test_a_json_config_reads_the_same(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": {"hub": {"source": "org/model", "steps": 20}}}))
    assert ModelsConfig.load(path).models["hub"].steps == 20


@pytest.mark.parametrize("text", ["[models.x]\nsteps = 0\n", "[models.x]\nextra = 1\n", "= ="])
def test_an_invalid_config_is_a_clear_error(tmp_path, text):
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(ModelsConfigError, match="models.toml"):
        ModelsConfig.load(path)


def test_with_a_config_a_path_like_name_is_refused_without_touching_the_file_system(
        tmp_path, monkeypatch):
    from genloop.workers.engine import registry as module

    config = ModelsConfig.load(write_config(tmp_path))
    registry = module.ModelRegistry(device="cpu", models=config)

    def no_file_system(*args, **kwargs):
        raise AssertionError("the file system was consulted for a tenant's string")

    monkeypatch.setattr(module, "fingerprint", no_file_system)
    monkeypatch.setattr(module.Path, "is_dir", no_file_system)
    monkeypatch.setattr(module, "_hub_revision", no_file_system)
    monkeypatch.setattr(module, "_from_pretrained", no_file_system)
    for name in ("../../", "/etc", "/no/such/dir", "org/model", "house/../house"):
        with pytest.raises(Permanent, match=r"unknown model .*; allowed: house, shapes, tiny"):
            registry.identity(name)
        with pytest.raises(Permanent, match="unknown model"):
            registry.pipeline(name)


def test_a_configured_name_loads_its_source_with_its_defaults(tmp_path):
    from genloop.workers.engine.registry import ModelRegistry

    config = ModelsConfig.load(write_config(tmp_path))
    registry = ModelRegistry(device="cpu", models=config)
    source = tmp_path / "weights" / "house"
    from genloop.workers.fingerprint import fingerprint

    assert registry.identity("house") == f"path:{fingerprint(source)}"  # by content, not path
    defaults = registry.defaults("house")
    assert (defaults.steps, defaults.width, defaults.height) == (12, 256, 512)
    assert registry.identity("tiny") == ModelRegistry(device="cpu").identity("tiny")


def test_client_local_with_a_config_fails_an_unknown_model_once_never_retried(tmp_path):
    config = write_config(tmp_path)
    g = Graph()
    g.generate("p", model=str(tmp_path / "weights" / "house"), id="gen")
    with Client.local(home=tmp_path / "home", threads=1, models=config) as client:
        result = client.submit(g).wait(timeout=60)
    assert result.status == "failed"
    (failure,) = result.failures
    assert failure.error_type == "Permanent"
    assert failure.attempts == 1
    assert "unknown model" in failure.message
