"""The operator's models config: read from a file, and the only names a worker will load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genloop.sdk import Client, Graph, Permanent
from genloop.workers.models.models_config import ModelsConfig, ModelsConfigError


def write_folder(folder: Path, sample_size: int = 16, vae_blocks: int = 2) -> Path:
    """The JSON files of a pipeline folder (no weights): enough to check and size it."""
    index = {"_class_name": "StableDiffusionPipeline",
             "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
             "safety_checker": [None, None]}
    configs = {"unet": {"sample_size": sample_size},
               "vae": {"block_out_channels": [32] * vae_blocks}}
    for component, config in configs.items():
        (folder / component).mkdir(parents=True)
        (folder / component / "config.json").write_text(json.dumps(config))
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


def write_config(tmp_path: Path) -> Path:
    write_folder(tmp_path / "weights" / "house")
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
    from genloop.workers.models import model_identity

    config = ModelsConfig.load(write_config(tmp_path))
    registry = module.ModelRegistry(device="cpu", models=config)

    def no_file_system(*args, **kwargs):
        raise AssertionError("the file system was consulted for a tenant's string")

    monkeypatch.setattr(model_identity, "fingerprint", no_file_system)
    monkeypatch.setattr(model_identity.Path, "is_dir", no_file_system)
    monkeypatch.setattr(model_identity, "_hub_revision", no_file_system)
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
    from genloop.workers.models.fingerprint import fingerprint

    assert registry.identity("house") == f"path:{fingerprint(source)}"  # by content, not path
    defaults = registry.defaults("house")
    # the configured width; the height the folder's own (unet sample 16 x vae scale 2)
    assert (defaults.steps, defaults.width, defaults.height) == (12, 256, 32)
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


def test_listing_the_served_models_imports_no_diffusers(tmp_path):
    # Given a fresh interpreter with a local back end and an operator's config
    config = write_config(tmp_path)
    script = (
        "import json, sys\n"
        "from genloop.sdk import Client\n"
        f"with Client.local(home={str(tmp_path / 'home')!r}, threads=0, "
        f"models={str(config)!r}) as client:\n"
        "    served = client.schema().served\n"
        "print(json.dumps({'models': [m.name for m in served.models],\n"
        "                  'loaded': [m for m in ('diffusers', 'torch') if m in sys.modules]}))\n"
    )
    # When it lists the models it serves (client.schema(), GET /v1/schema, genloop schema)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    listed = json.loads(out.splitlines()[-1])
    # Then the built-ins and the configured name are listed, and neither diffusers nor torch
    # was imported to say so (the first schema call used to load them: seconds, idle)
    assert listed == {"models": ["house", "shapes", "tiny"], "loaded": []}


def test_the_torch_free_listing_says_what_a_registry_registers(tmp_path):
    from genloop.workers.engine.registry import ModelRegistry
    from genloop.workers.models.models_config import builtin_models
    from genloop.workers.models.resources import Resources

    # Given a fresh registry; Then the listing read without one matches it
    assert builtin_models() == ModelRegistry(device="cpu").builtin()
    # And once code built (or handed over) a registry, its own built-ins are listed
    registry = ModelRegistry(device="cpu", models=ModelsConfig.load(write_config(tmp_path)))
    registry.register("extra", lambda: None, "extra:1", registry.defaults("tiny"), "drawn here")
    assert Resources(models=registry).served_models() == {
        "house": "configured by the operator", "extra": "drawn here", **builtin_models()}


def test_a_configured_model_is_accepted_by_name_at_submit(tmp_path):
    # Given Client.local with a config naming "house" (described by the operator)
    config = write_config(tmp_path)
    config.write_text(config.read_text() + 'description = "our house style"\n')
    g = Graph()
    g.generate("p", model="house", id="gen")
    with Client.local(home=tmp_path / "home", threads=0, models=config) as client:
        # When its schema is read and a graph naming the model submitted
        served = {m.name: m.description for m in client.schema().served.models}
        run = client.submit(g)
    # Then the configured name is served with its description, and the graph is accepted
    # (it used to be refused: only the registry's built-ins were listed)
    assert served["house"] == "our house style"
    assert run.id


def test_a_folder_beside_the_config_is_a_folder_not_a_hub_id(tmp_path):
    # "weights/house" reads like the hub id of a user "weights"; the folder beside wins
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace('"./weights/house"', '"weights/house"'))
    entry = ModelsConfig.load(config).models["house"]
    assert entry.source == str((tmp_path / "weights" / "house").resolve())
    assert entry.folder is not None


def test_start_checks_name_an_uncached_hub_id_and_an_unreadable_size(tmp_path):
    from genloop.workers.models.models_config import ModelEntry, config_problems

    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model_index.json").write_text(json.dumps({"_class_name": "HousePipeline"}))
    config = ModelsConfig(models={
        "hub": ModelEntry(source="nobody/no-such-model"),
        "bare": ModelEntry(source=str(bare)),
        "sized": ModelEntry(source=str(bare), width=64, height=64),  # needs no native size
    })
    problems = config_problems(config)
    assert problems == [
        "models.hub: 'nobody/no-such-model' is neither an absolute folder path nor a hub id "
        "in the Hugging Face cache (no downloads)",
        f"models.bare: {bare}: no denoiser (unet, transformer, prior) and vae to read the "
        "native size from; set width and height"]


KEYED_WITHOUT_TORCH = """
import json, sys
from genloop.sdk.ops import GenerateParams
from genloop.workers.models.models_config import ModelsConfig
from genloop.workers.ops.registry import default_registry
from genloop.workers.models.resources import Resources
import genloop.workers.ops.generate  # registers generate

resources = Resources(allowed=ModelsConfig.load(sys.argv[1]))
generate = default_registry["generate"]
keyed = {m: generate.identity(GenerateParams(prompt="x", model=m), resources)
         for m in ("tiny", "shapes", "house", "sim")}
torch_then = "torch" in sys.modules
print(json.dumps([torch_then, keyed, {m: resources.models.identity(m) for m in keyed}]))
"""


def test_generate_work_is_keyed_without_torch_as_the_registry_keys_it(tmp_path):
    # An executor keys an instance before any work: a stored result, or a claim taken up from
    # a crashed process, must not wait seconds for torch.
    config = write_config(tmp_path)
    config.write_text(config.read_text() + "\n[models.sim]\nsteps = 4\n\n[models.sim.simulated]\n"
                      "load_seconds = 0\nstep_seconds = { 1 = 0.01 }\nresident_bytes = 1000\n")
    out = subprocess.run([sys.executable, "-c", KEYED_WITHOUT_TORCH, str(config)],
                         capture_output=True, text=True, check=True).stdout
    torch_then, keyed, registry = json.loads(out.splitlines()[-1])
    assert not torch_then
    assert keyed == registry
    assert keyed["tiny"] == "tiny-v1" and keyed["shapes"].startswith("shapes:")
    assert keyed["house"].startswith("path:") and keyed["sim"].startswith("simulated:")
