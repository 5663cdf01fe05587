"""Every architecture the engine serves, on tiny random-weight SDXL, SD3 and Flux folders built
in the test (:mod:`arch_util`) and loaded through the registry's ``from_pretrained``: the
capability map reads each one, its ``default`` cache runs text-to-image, img2img and inpainting
through a Loop, ``off`` matches plain diffusers, sizes are honoured, and a cache mode the
architecture cannot run fails at once."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from arch_util import ARCHITECTURES, NATIVE_SIZE, save_pipeline
from engine_helpers import psnr
from PIL import Image

from genloop.sdk import Client, Loop, RunStatus
from genloop.sdk.errors import Permanent
from genloop.sdk.ops import GenerationRequest
from genloop.workers.engine.generate import ImageSettings
from genloop.workers.models import capabilities

EXPECTED = {"sdxl": capabilities.SDXL, "sd3": capabilities.SD3, "flux": capabilities.FLUX}
SIZE = 64
STEPS = 8


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("architectures")
    return {arch: str(save_pipeline(arch, root)) for arch in ARCHITECTURES}


@pytest.fixture(scope="module")
def registry():
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.registry import ModelRegistry

    reg = ModelRegistry("cpu", engine_options=EngineOptions(window=0.0))
    yield reg
    reg.engine.close()


def _init(size: int = SIZE) -> Image.Image:
    image = Image.new("RGB", (size, size), (200, 30, 30))
    image.paste((20, 20, 220), (0, 0, size // 2, size))
    return image


def _mask(size: int = SIZE) -> Image.Image:
    mask = Image.new("L", (size, size), 0)
    mask.paste(255, (size // 4, size // 4, 3 * size // 4, 3 * size // 4))
    return mask


def _settings(cache: str, kind: str = "text", size: int = SIZE) -> ImageSettings:
    strength = {"text": 1.0, "img2img": 0.5, "inpaint": 0.75}[kind]
    return ImageSettings(steps=STEPS, guidance=5.0, width=size, height=size, cache=cache,
                         kind=kind, strength=strength)


def _edit(kind: str, n: int, size: int = SIZE) -> dict:
    if kind == "text":
        return {}
    out = {"init_images": [_init(size)] * n}
    if kind == "inpaint":
        out["masks"] = [_mask(size)] * n
    return out


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_map_reads_each_folder_and_its_loaded_pipeline(arch, folders, registry):
    assert capabilities.folder_architecture(folders[arch]) is EXPECTED[arch]
    with registry.acquire(folders[arch]) as pipe:
        assert capabilities.architecture_of(pipe) is EXPECTED[arch]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_default_cache_resolves_to_the_architectures_mode_and_installs_it(arch, folders,
                                                                          registry):
    from genloop.workers.engine.deepcache import deepcache_stats
    from genloop.workers.engine.step_cache import prepare_step_cache

    expected = EXPECTED[arch].default_cache
    registry.engine.generate(folders[arch], ["a red circle"], [0], _settings("default"))

    with registry.acquire(folders[arch]) as pipe:
        if expected == "deepcache":
            assert deepcache_stats(pipe.unet)[1] > 0  # the call above skipped deep blocks
        else:
            from diffusers.hooks import HookRegistry

            hooks = HookRegistry.check_if_exists_or_initialize(pipe.transformer)
            names = {n for r in hooks._get_child_registries() for n in r.hooks}
            assert {"fbcache": "fbc_leader_block_hook",
                    "taylorseer": "taylorseer_cache"}[expected] in names
        assert prepare_step_cache(pipe, "default", STEPS).kind == expected
        prepare_step_cache(pipe, "off", STEPS)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("kind", ["text", "img2img", "inpaint"])
def test_every_cache_mode_in_the_map_runs_and_the_others_are_permanent(arch, kind, folders,
                                                                      registry):
    arch_map = EXPECTED[arch]
    for mode in capabilities.CACHE_MODES:
        settings = _settings(mode, kind)
        if arch_map.allows(mode):
            images = registry.engine.generate(folders[arch], ["a red circle"], [1], settings,
                                              **_edit(kind, 1))
            assert images[0].size == (SIZE, SIZE), mode
        else:
            with pytest.raises(Permanent, match=f"cache mode '{mode}' cannot run"):
                registry.engine.generate(folders[arch], ["a red circle"], [1], settings,
                                         **_edit(kind, 1))


def _plain(path: str, kind: str, prompts: list[str], seeds: list[int], size: int):
    """Plain diffusers' own batched call on a fresh load of the folder."""
    from diffusers import (
        AutoPipelineForImage2Image,
        AutoPipelineForInpainting,
        AutoPipelineForText2Image,
    )

    auto = {"text": AutoPipelineForText2Image, "img2img": AutoPipelineForImage2Image,
            "inpaint": AutoPipelineForInpainting}[kind]
    pipe = auto.from_pretrained(path, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    settings = _settings("off", kind, size)
    extra: dict = {}
    if kind != "text":
        extra = {"image": [_init(size)] * len(prompts), "strength": settings.strength}
        if kind == "inpaint":
            extra["mask_image"] = [_mask(size)] * len(prompts)
    import inspect

    if kind == "text" or "width" in inspect.signature(type(pipe).__call__).parameters:
        extra.update(width=size, height=size)
    return pipe(prompt=prompts, num_inference_steps=STEPS, guidance_scale=5.0,
                generator=[torch.Generator("cpu").manual_seed(s) for s in seeds],
                **extra).images


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("kind", ["text", "img2img", "inpaint"])
def test_cache_off_equals_plain_diffusers(arch, kind, folders, registry):
    prompts, seeds = ["a red circle", "a blue square"], [3, 4]
    ours = registry.engine.generate(folders[arch], prompts, seeds, _settings("off", kind),
                                    **_edit(kind, 2))
    theirs = _plain(folders[arch], kind, prompts, seeds, SIZE)

    assert min(psnr(a, b) for a, b in zip(ours, theirs, strict=True)) >= 60.0


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_edits_come_out_at_the_size_asked_not_the_pipelines_default(arch, folders, registry):
    native = NATIVE_SIZE[arch]
    for size in (SIZE, native):
        for kind in ("text", "img2img"):
            images = registry.engine.generate(
                folders[arch], ["a cat"], [0], _settings("default", kind, size),
                **_edit(kind, 1, size))
            assert images[0].size == (size, size), (kind, size)


def _edits_refiner(mask_key: list[str]):
    """Round 2: one img2img and one inpainting edit of the best image."""
    from genloop.workers.ops.refine import RefinerRegistry

    def edits(scored, params) -> list[GenerationRequest]:
        best = max(scored, key=lambda c: (c.score, -c.index))
        return [GenerationRequest(prompt=params.prompt, seed=7, round=params.round + 1,
                                  init_image=best.artifact, strength=0.5),
                GenerationRequest(prompt=params.prompt, seed=8, round=params.round + 1,
                                  init_image=best.artifact, mask=mask_key[0], strength=0.75)]

    return RefinerRegistry({"edits": edits})


def _judges():
    from genloop.evaluators import EvaluatorRegistry, FunctionEvaluator

    evaluators = EvaluatorRegistry()
    evaluators.register("brightness", lambda device: FunctionEvaluator(
        "brightness", lambda images, text: [float(np.asarray(i.convert("L")).mean())
                                            for i in images], device=device))
    return evaluators


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_loop_draws_edits_and_inpaints_with_the_default_cache(arch, folders, tmp_path):
    from genloop.workers.models.models_config import ModelsConfig

    models = ModelsConfig.model_validate({"models": {"mine": {
        "source": folders[arch], "width": SIZE, "height": SIZE, "steps": STEPS}}})
    mask_key: list[str] = []
    with Client.local(tmp_path / "home", models=models, evaluators=_judges(),
                      refiners=_edits_refiner(mask_key)) as client:
        buf = io.BytesIO()
        _mask().save(buf, format="PNG")
        mask_key.append(client.upload(buf.getvalue()))
        result = client.submit(Loop(prompt="a red circle", model="mine", candidates=2,
                                    rounds=2, evaluator="brightness", refiner="edits",
                                    steps=STEPS)).wait(timeout=300)
        images = {c.artifact: Image.open(io.BytesIO(client.read_artifact(c.artifact)))
                  for node in ("round-1/generate", "round-2/generate")
                  for c in result.items(node)}

    assert result.status == RunStatus.SUCCEEDED and not result.failures, result.failures
    edits = result.items("round-2/generate")
    assert [(c.strength, c.mask) for c in edits] == [(0.5, None), (0.75, mask_key[0])]
    assert {image.size for image in images.values()} == {(SIZE, SIZE)}


def test_a_loops_cache_reaches_every_generate_node_and_its_images(folders, tmp_path):
    loop = Loop(prompt="a red circle", model="mine", candidates=2, rounds=2, cache="off",
                evaluator="brightness", refiner="edits", steps=STEPS)
    generate = [n for n in loop.compile().nodes if n.op == "generate"]
    assert [n.params["cache"] for n in generate] == ["off", "off"]
    assert all("cache" not in n.params
               for n in loop.model_copy(update={"cache": "default"}).compile().nodes)

    from genloop.workers.models.models_config import ModelsConfig

    models = ModelsConfig.model_validate({"models": {"mine": {
        "source": folders["flux"], "width": SIZE, "height": SIZE, "steps": STEPS}}})
    with Client.local(tmp_path / "home", models=models, evaluators=_judges(),
                      refiners=_edits_refiner(["unused"])) as client:
        result = client.submit(loop.model_copy(update={"rounds": 1})).wait(timeout=300)
        ours = [Image.open(io.BytesIO(client.read_artifact(c.artifact)))
                for c in result.items("round-1/generate")]
    theirs = _plain(folders["flux"], "text", ["a red circle"] * 2, [0, 1], SIZE)

    assert min(psnr(a, b) for a, b in zip(ours, theirs, strict=True)) >= 60.0


def test_a_cache_mode_a_configured_model_cannot_run_is_refused_at_submit(folders, tmp_path):
    from genloop.sdk import Graph, GraphError
    from genloop.workers.models.models_config import ModelsConfig

    models = ModelsConfig.model_validate({"models": {
        arch: {"source": folders[arch], "width": SIZE, "height": SIZE} for arch in ARCHITECTURES}})
    graph = Graph()
    graph.generate("a cat", model="sd3", cache="fbcache:0.1", id="g")
    with Client.local(tmp_path / "home", models=models, evaluators=_judges()) as client:
        served = client.schema().served.cache_modes
        with pytest.raises(GraphError) as loop_refused:
            client.submit(Loop(prompt="a cat", model="sdxl", evaluator="brightness",
                               cache="taylorseer"))
        with pytest.raises(GraphError) as graph_refused:
            client.submit(graph)
        assert list(client.runs()) == []

    assert {name: served[name] for name in ARCHITECTURES} == {
        "sdxl": ["default", "off", "deepcache"], "sd3": ["default", "off", "taylorseer"],
        "flux": ["default", "off", "fbcache", "taylorseer"]}
    assert [(p.path, p.received) for p in loop_refused.value.problems] == [
        ("cache", "taylorseer")]
    assert [(p.path, p.allowed) for p in graph_refused.value.problems] == [
        ("nodes[0].params.cache", ["default", "off", "taylorseer"])]


def test_a_cache_mode_a_model_cannot_run_fails_once_without_retries(folders, tmp_path):
    # A folder named by trusted code is loaded, not read at submit: the worker finds out.
    with Client.local(tmp_path / "home", evaluators=_judges()) as client:
        result = client.submit(Loop(prompt="a cat", model=folders["sdxl"], candidates=1,
                                    rounds=1, steps=STEPS, width=SIZE, height=SIZE,
                                    evaluator="brightness", cache="taylorseer")).wait(timeout=300)

    assert result.status == RunStatus.FAILED
    assert [(f.error_type, f.attempts) for f in result.failures
            if f.node_id == "round-1/generate"] == [("Permanent", 1)]
    assert "cannot run on UNet (SDXL)" in result.failures[0].message


def test_the_gateway_refuses_a_tenants_cache_mode_the_model_cannot_run(folders):
    from genloop.gateway.admission import default_admission
    from genloop.gateway.limits import TenantLimits
    from genloop.sdk import GraphError
    from genloop.workers import default_registry as ops
    from genloop.workers.models.models_config import ModelsConfig

    admission = default_admission(ops, ModelsConfig.model_validate(
        {"models": {"flux": {"source": folders["flux"]}}}))
    loop = Loop(prompt="a cat", model="flux", rounds=1, candidates=1, evaluator="clip")

    admission.admit(loop.model_copy(update={"cache": "fbcache:0.1"}), TenantLimits())
    with pytest.raises(GraphError, match="model 'flux' cannot run cache mode 'deepcache:3'"):
        admission.admit(loop.model_copy(update={"cache": "deepcache:3"}), TenantLimits())


def test_a_worker_refuses_to_start_on_a_models_own_cache_its_architecture_cannot_run(folders):
    from genloop.workers.models.models_config import ModelsConfig, ModelsConfigError
    from genloop.workers.models.resources import Resources
    from genloop.workers.pool.worker_process import refuse_bad_config

    config = ModelsConfig.model_validate({"models": {
        "sd3": {"source": folders["sd3"], "cache": "fbcache"},
        "flux": {"source": folders["flux"], "cache": "taylorseer"}}})

    with pytest.raises(ModelsConfigError) as caught:
        refuse_bad_config(Resources(device="cpu", allowed=config))
    assert "models.sd3: cache mode 'fbcache' cannot run on SD3 (MMDiT)" in str(caught.value)
    assert "models.flux" not in str(caught.value)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_model_configured_without_a_size_draws_and_edits_at_its_native_size(arch, folders,
                                                                              tmp_path):
    from genloop.workers.models.models_config import ModelsConfig

    native = NATIVE_SIZE[arch]
    models = ModelsConfig.model_validate({"models": {"mine": {"source": folders[arch]}}})
    mask_key: list[str] = []
    with Client.local(tmp_path / "home", models=models, evaluators=_judges(),
                      refiners=_edits_refiner(mask_key)) as client:
        buf = io.BytesIO()
        _mask(native).save(buf, format="PNG")
        mask_key.append(client.upload(buf.getvalue()))
        result = client.submit(Loop(prompt="a red circle", model="mine", candidates=1, rounds=2,
                                    evaluator="brightness", refiner="edits",
                                    steps=2)).wait(timeout=300)
        sizes = {Image.open(io.BytesIO(client.read_artifact(c.artifact))).size
                 for node in ("round-1/generate", "round-2/generate")
                 for c in result.items(node)}

    assert result.status == RunStatus.SUCCEEDED and not result.failures, result.failures
    assert len(result.items("round-2/generate")) == 2 and sizes == {(native, native)}


def test_a_pipeline_no_cache_runs_on_runs_uncached_and_says_why_once(caplog):
    from genloop.workers.engine.step_cache import prepare_step_cache

    class UnheardOfPipeline:
        """No unet, no transformer: no row of the map but 'anything else'."""

    with caplog.at_level("WARNING", logger="genloop.workers.engine.step_cache"):
        plans = [prepare_step_cache(UnheardOfPipeline(), "default", STEPS) for _ in range(3)]

    assert [p.kind for p in plans] == ["off"] * 3
    (record,) = caplog.records
    assert "UnheardOfPipeline (anything else) runs without a step cache" in record.message


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_has_regions_to_compile(arch, folders, registry):
    from genloop.workers.engine.compile import Compiler

    compiler = Compiler(backend="eager")
    with registry.acquire(folders[arch]) as pipe:
        try:
            # SD3's transformer names no _repeated_blocks: the map's JointTransformerBlock does
            assert compiler.apply(pipe) and compiler.is_compiled(pipe)
        finally:
            compiler.remove(pipe)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_reuse_starts_part_way_on_every_architecture(arch, folders, registry):
    # Ten steps: the reuse table's 10% row skips one. Seeds 0 and 1 are stored by the first
    # request, seed 2 is not, so the second request's batch holds two start steps (a call for
    # each here: only Stable Diffusion pipelines join later starts into one)
    settings = ImageSettings(steps=10, guidance=5.0, width=SIZE, height=SIZE, cache="off")
    engine = registry.engine
    engine.wait(engine.submit(folders[arch], ["a red circle"] * 2, [0, 1], settings, reuse=True))

    job = engine.submit(folders[arch], ["a blue circle"] * 3, [0, 1, 2], settings, reuse=True)
    images = engine.wait(job)
    off = engine.generate(folders[arch], ["a blue circle"] * 3, [0, 1, 2], settings)

    assert [s.step if s is not None else 0 for s in job.starts] == [1, 1, 0]
    close = [psnr(a, b) for a, b in zip(images, off, strict=True)]
    assert all(im.size == (SIZE, SIZE) for im in images)
    assert all(25 < value < float("inf") for value in close[:2]), close  # 34-58 dB measured
    assert close[2] > 40, close
