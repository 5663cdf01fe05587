"""A team's own pipeline folder served from models.toml alone: its native size, a dtype of its
choosing, its defaults, and configuration problems refused at start or failed once (never
retried) with the model's name for the tenant and the path only in the operator's log."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

from genloop.sdk import Client, Graph, RunStatus
from genloop.sdk.ops import Candidate
from genloop.workers.models.models_config import ModelsConfig, ModelsConfigError


@pytest.fixture(scope="module")
def folder(tmp_path_factory, resources) -> Path:
    """The random-weight tiny pipeline saved as a team's folder: native size 32 (its UNet's
    sample size 16 x its VAE's scale 2)."""
    path = tmp_path_factory.mktemp("weights") / "house"
    resources.models.pipeline("tiny").save_pretrained(path)
    return path


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def draw(model: str, steps: int = 2) -> Graph:
    g = Graph()
    g.generate("a red circle", n=1, model=model, steps=steps, id="gen", max_retries=3)
    return g


def drawn(client: Client, graph: Graph) -> tuple[Candidate, Image.Image]:
    result = client.submit(graph).wait(timeout=120)
    assert result.status == RunStatus.SUCCEEDED, result.failures
    (candidate,) = result.items("gen")
    return candidate, Image.open(__import__("io").BytesIO(client.read_artifact(
        candidate.artifact)))


def test_without_a_size_a_model_draws_its_folders_native_size(tmp_path, folder):
    # Given an entry with neither width nor height (the engine's default used to be 512)
    config = config_file(tmp_path, f'[models.house]\nsource = "{folder}"\n')
    with Client.local(home=tmp_path / "home", threads=1, models=config) as client:
        candidate, image = drawn(client, draw("house"))
    # Then the image is the pipeline's own size, read from its unet and vae configs
    assert (candidate.width, candidate.height) == (32, 32) == image.size


def test_a_configured_size_steps_and_guidance_are_the_defaults(tmp_path, folder):
    config = config_file(tmp_path, f'[models.house]\nsource = "{folder}"\nwidth = 48\n'
                         'height = 40\nsteps = 3\nguidance = 2.0\ncache = "off"\n')
    g = Graph()
    g.generate("a red circle", n=1, model="house", id="gen")
    with Client.local(home=tmp_path / "home", threads=1, models=config) as client:
        candidate, image = drawn(client, g)
        defaults = client.backend.runtime.resources.models.defaults("house")
    assert image.size == (48, 40) and candidate.steps == 3
    assert (defaults.guidance, defaults.cache) == (2.0, "off")


def test_bfloat16_is_selectable_on_a_cpu_and_changes_the_identity(tmp_path, folder):
    from genloop.workers.engine.registry import ModelRegistry

    # Given the same folder as float32 and as bfloat16
    both = config_file(tmp_path, f'[models.fp32]\nsource = "{folder}"\n\n'
                       f'[models.bf16]\nsource = "{folder}"\ndtype = "bfloat16"\n')
    registry = ModelRegistry(device="cpu", models=ModelsConfig.load(both))
    # Then each loads in its own precision, and results made in one are not reused for the other
    assert registry.pipeline("bf16").unet.dtype == torch.bfloat16
    assert registry.pipeline("fp32").unet.dtype == torch.float32
    assert registry.identity("bf16") != registry.identity("fp32")
    # And a run on the bfloat16 model draws
    with Client.local(home=tmp_path / "home", threads=1, models=both) as client:
        candidate, _ = drawn(client, draw("bf16"))
    assert candidate.model == "bf16"


def test_float16_on_a_cpu_is_refused_at_start(tmp_path, folder):
    from genloop.workers.engine.registry import ModelRegistry

    config = ModelsConfig.load(config_file(
        tmp_path, f'[models.house]\nsource = "{folder}"\ndtype = "float16"\ndevice = "cpu"\n'))
    (problem,) = ModelRegistry(device="cpu", models=config).config_problems()
    assert "models.house: float16 needs a GPU" in problem


def test_every_invalid_field_is_named_at_once(tmp_path):
    config = config_file(tmp_path, '[models.a]\nsource = "/x"\ndtype = "float8"\n'
                         'device = "gpu0"\ncache = "fast"\nmemory_gib = -1\n')
    with pytest.raises(ModelsConfigError) as caught:
        ModelsConfig.load(config)
    for field in ("dtype", "device", "cache", "memory_gib"):
        assert f"models.a.{field}" in str(caught.value)


def test_a_worker_refuses_to_start_naming_every_folder_problem(tmp_path, folder):
    from genloop.workers.models.resources import Resources
    from genloop.workers.pool import worker_process

    # Given a folder that does not exist, one missing its vae, one of a class diffusers lacks
    no_vae, odd = tmp_path / "no-vae", tmp_path / "odd"
    shutil.copytree(folder, no_vae)
    shutil.rmtree(no_vae / "vae")
    shutil.copytree(folder, odd)
    config = config_file(tmp_path, f'memory_budget_gib = 1\n\n'
                         f'[models.gone]\nsource = "{tmp_path / "nowhere"}"\n\n'
                         f'[models.novae]\nsource = "{no_vae}"\n\n'
                         f'[models.odd]\nsource = "{odd}"\npipeline = "HousePipeline"\n\n'
                         f'[models.big]\nsource = "{folder}"\nmemory_gib = 2\n')
    # When a worker starts on it
    with pytest.raises(ModelsConfigError) as caught:
        worker_process.refuse_bad_config(Resources(allowed=worker_process.worker_config(
            str(config), None)))
    # Then it says every problem, each with its path (the operator reads this)
    text = str(caught.value)
    assert f"models.gone: {tmp_path / 'nowhere'}: no such folder" in text
    assert f"models.novae: {no_vae}: component subfolder 'vae' missing" in text
    assert "models.odd: diffusers" in text and "'HousePipeline'" in text
    assert "models.big: memory_gib 2 is more than memory_budget_gib 1" in text


def test_the_memory_budget_flag_overrides_the_config(tmp_path, folder):
    from genloop.workers.models.resources import Resources
    from genloop.workers.pool import worker_process

    config = config_file(tmp_path, f'memory_budget_gib = 8\n\n[models.house]\nsource = '
                         f'"{folder}"\nmemory_gib = 1.5\n')
    budget = Resources(allowed=worker_process.worker_config(str(config), 1.0)).models.residency
    assert budget.budget == 2**30
    with pytest.raises(ModelsConfigError, match="memory_gib 1.5 is more than memory_budget_gib"):
        worker_process.refuse_bad_config(Resources(allowed=worker_process.worker_config(
            str(config), 1.0)))


def test_client_local_refuses_a_missing_folder_at_start(tmp_path):
    config = config_file(tmp_path, f'[models.gone]\nsource = "{tmp_path / "nowhere"}"\n')
    with pytest.raises(ModelsConfigError, match="models.gone: .*nowhere: no such folder"):
        Client.local(home=tmp_path / "home", threads=0, models=config)


@pytest.mark.parametrize("breakage", ["folder", "component"])
def test_a_folder_gone_after_start_fails_once_naming_the_model_not_the_path(
        tmp_path, folder, caplog, breakage):
    # Given a worker started on a good folder, which then loses its weights
    weights = tmp_path / "house"
    shutil.copytree(folder, weights)
    config = config_file(tmp_path, f'[models.house]\nsource = "{weights}"\n')
    with Client.local(home=tmp_path / "home", threads=1, models=config) as client:
        shutil.rmtree(weights if breakage == "folder" else weights / "unet")
        with caplog.at_level(logging.ERROR, logger="genloop.workers.engine.registry"):
            run = client.submit(draw("house"))
            result = run.wait(timeout=60)
        retries = [e for e in run.events(follow=False) if e.type == "instance.retry"]
    # Then it failed at once, Permanent, never retried (max_retries=3 was asked)
    assert result.status == RunStatus.FAILED
    (failure,) = result.failures
    assert (failure.error_type, failure.attempts, retries) == ("Permanent", 1, [])
    # And the tenant's message names the model and what is missing, never the path
    assert "model 'house' cannot be loaded" in failure.message
    assert str(tmp_path) not in failure.message
    if breakage == "component":
        assert "'unet'" in failure.message
    # While the operator's log has the path
    assert str(weights) in caplog.text


def test_trusted_codes_missing_folder_fails_once_not_through_a_hub_lookup(client, tmp_path):
    # A path that does not exist used to reach the hub's id check (HFValidationError), retried
    run = client.submit(draw(str(tmp_path / "no" / "such" / "folder")))
    result = run.wait(timeout=60)
    (failure,) = result.failures
    assert (failure.error_type, failure.attempts) == ("Permanent", 1)
    assert "no such folder" in failure.message


def test_genloop_worker_takes_its_memory_budget_from_the_flag(tmp_path, folder, capsys):
    from genloop.workers.cli.main import main

    # Given a model whose share (1.5 GiB) fits the config's budget but not the flag's
    config = config_file(tmp_path, f'memory_budget_gib = 8\n\n[models.house]\nsource = '
                         f'"{folder}"\nmemory_gib = 1.5\n')
    code = main(["worker", "--redis", "redis://127.0.0.1:1/0", "--artifacts",
                 f"file://{tmp_path}", "--models", str(config), "--memory-budget", "1"])
    # Then the worker refuses to start, before any process is started
    assert code == 1
    assert "memory_gib 1.5 is more than memory_budget_gib 1" in capsys.readouterr().err


def test_the_gateway_costs_a_model_at_its_native_size(tmp_path, folder):
    from genloop.gateway.admission import default_admission
    from genloop.workers.ops.registry import default_registry

    config = ModelsConfig.load(config_file(tmp_path, f'[models.house]\nsource = "{folder}"\n'))
    size = default_admission(default_registry, config).size_of("house")
    assert (size.width, size.height) == (32, 32)


def test_a_share_or_a_model_larger_than_the_budget_is_said_in_units_that_show_it(
        tmp_path, folder):
    from genloop.sdk import Permanent
    from genloop.workers.engine.registry import ModelRegistry

    config = ModelsConfig.load(config_file(
        tmp_path, f'[models.house]\nsource = "{folder}"\n\n'
        f'[models.shared]\nsource = "{folder}"\nmemory_gib = 1\n'))
    registry = ModelRegistry(device="cpu", memory_budget=2**20, models=config)
    (problem,) = registry.config_problems()
    assert problem == "models.shared: memory_gib 1 is more than the memory budget, 1.0 MiB"
    # a tiny model used to be "needs 0.0 GiB, budget 0.0 GiB"
    with pytest.raises(Permanent, match=r"needs \d+\.\d MiB, more than the memory budget of "
                                        r"1\.0 MiB"):
        registry.pipeline("house")


def test_a_models_cache_is_what_a_requests_default_cache_runs_with(tmp_path, folder):
    import numpy as np

    # Given one folder served exact and with DeepCache by default
    config = config_file(tmp_path, f'[models.exact]\nsource = "{folder}"\ncache = "off"\n\n'
                         f'[models.fast]\nsource = "{folder}"\ncache = "deepcache:2"\n')

    def pixels(client: Client, model: str, cache: str = "default") -> np.ndarray:
        g = Graph()
        g.generate("a red circle", n=1, model=model, steps=10, cache=cache, id="gen")
        return np.asarray(drawn(client, g)[1], dtype=np.int16)

    with Client.local(home=tmp_path / "home", threads=1, models=config) as client:
        exact, fast = pixels(client, "exact"), pixels(client, "fast")
        asked = pixels(client, "exact", cache="deepcache:2")
    # Then each model's default is its own, and a request may still name another
    assert np.abs(exact - fast).max() > 0
    assert np.array_equal(fast, asked)


def test_pipeline_names_the_class_a_folder_saved_from_a_subclass_loads_as(tmp_path, folder):
    import json

    from genloop.workers.engine.registry import ModelRegistry

    # Given a folder whose index names the team's own subclass, which diffusers lacks
    house = tmp_path / "house"
    shutil.copytree(folder, house)
    index = json.loads((house / "model_index.json").read_text())
    (house / "model_index.json").write_text(json.dumps({**index, "_class_name": "HousePipeline"}))
    unnamed = ModelsConfig.load(config_file(tmp_path, f'[models.house]\nsource = "{house}"\n'))
    named = ModelsConfig.load(config_file(
        tmp_path, f'[models.house]\nsource = "{house}"\npipeline = "StableDiffusionPipeline"\n'))
    # Then without pipeline the worker names the class; with it, it loads as that class
    (problem,) = ModelRegistry(device="cpu", models=unnamed).config_problems()
    assert "no pipeline class 'HousePipeline'; set pipeline" in problem
    registry = ModelRegistry(device="cpu", models=named)
    assert registry.config_problems() == []
    assert type(registry.pipeline("house")).__name__ == "StableDiffusionPipeline"


def test_a_models_own_device_decides_what_its_dtype_may_be(tmp_path, folder):
    from genloop.workers.engine.registry import ModelRegistry

    config = ModelsConfig.load(config_file(
        tmp_path, f'[models.gpu]\nsource = "{folder}"\ndtype = "float16"\ndevice = "cuda:1"\n'))
    registry = ModelRegistry(device="cpu", models=config)
    assert (registry.device_of("gpu"), registry.dtype_of("gpu")) == ("cuda:1", torch.float16)
    # float16 is refused only where it runs on a CPU; a device this host lacks is refused
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert registry.config_problems() == ([] if gpus > 1 else [
        f"models.gpu: device cuda:1: this host has {gpus} CUDA device(s)"])


def test_a_models_engine_table_sets_its_batch_cap_layout_bf16_and_compile(tmp_path, folder):
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.generate import ImageSettings
    from genloop.workers.engine.registry import ModelRegistry

    def no_compiler(gm, example_inputs):
        raise RuntimeError("no compiler here")

    # Given two models of one folder, one with its own engine settings, on a worker whose
    # options set none of them (compile off)
    config = ModelsConfig.load(config_file(tmp_path, (
        f'[models.house]\nsource = "{folder}"\n[models.house.engine]\nmax_batch = 2\n'
        'channels_last = true\ncpu_bf16 = false\ncompile = true\n'
        f'[models.plain]\nsource = "{folder}"\n')))
    reg = ModelRegistry("cpu", models=config, engine_options=EngineOptions(
        window=0.0, compile_backend=no_compiler, cpu_bf16=True))
    engine = reg.engine
    settings = ImageSettings(steps=2, guidance=5.0, width=32, height=32, cache="off")
    batches = engine.batcher.batches
    try:
        # When each draws six images in one request
        engine.generate("house", [f"a cat {i}" for i in range(6)], list(range(6)), settings)
        engine.generate("plain", [f"a dog {i}" for i in range(6)], list(range(6)), settings)
        house, plain = reg.pipeline("house").unet, reg.pipeline("plain").unet
    finally:
        engine.close()

    # Then its batches keep to its cap, its layout and compile are its own, and the worker's
    # options hold for the other
    assert batches == [2, 2, 2, 6]
    assert house.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    assert not plain.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    assert house in engine.compiler.failed and plain not in engine.compiler.failed
    assert (engine.cpu_bf16("house"), engine.cpu_bf16("plain")) == (False, True)


def test_an_engine_table_is_checked_and_a_simulated_model_takes_none(tmp_path):
    with pytest.raises(ModelsConfigError, match="max_batch"):
        ModelsConfig.load(config_file(tmp_path, '[models.a]\nsource = "x/y"\n'
                                      '[models.a.engine]\nmax_batch = 0\n'))
    with pytest.raises(ModelsConfigError, match="threads"):
        ModelsConfig.load(config_file(tmp_path, '[models.a]\nsource = "x/y"\n'
                                      '[models.a.engine]\nthreads = 2\n'))
    with pytest.raises(ModelsConfigError, match="remove pipeline, dtype, device, engine"):
        ModelsConfig.load(config_file(tmp_path, (
            '[models.s]\nsteps = 2\n[models.s.simulated]\nload_seconds = 0\n'
            'step_seconds = { 1 = 0.01 }\nresident_bytes = 1000\n[models.s.engine]\n'
            'max_batch = 2\n')))


def test_client_local_refuses_at_start_what_a_worker_refuses(tmp_path, folder):
    # Given a config with a problem a worker names at start in each of four entries (only the
    # folders were checked by Client.local: float16 ran on the CPU, the missing class was
    # retried, the cache failed each request, the device each load)
    config = config_file(tmp_path, (
        f'[models.half]\nsource = "{folder}"\ndtype = "float16"\ndevice = "cpu"\n'
        f'[models.cls]\nsource = "{folder}"\npipeline = "NoSuchPipeline"\n'
        f'[models.cached]\nsource = "{folder}"\ncache = "fbcache:0.1"\n'
        f'[models.gpu]\nsource = "{folder}"\ndevice = "cuda:7"\n'))
    # When the embedded runtime starts, then it refuses, naming all four
    with pytest.raises(ModelsConfigError) as refused:
        Client.local(home=tmp_path / "home", threads=1, models=config)
    text = str(refused.value)
    assert "models.half: float16 needs a GPU" in text
    assert "models.cls: diffusers" in text and "NoSuchPipeline" in text
    assert "models.cached: cache mode 'fbcache:0.1' cannot run on UNet" in text
    assert "models.gpu: device cuda:7: this host has" in text
    assert not (tmp_path / "home").exists()
