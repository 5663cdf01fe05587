"""Simulated models (workers/engine/simulated.py): an operator's config declares them, the
registry loads them in their load time and counts their bytes in its budget, and the engine
runs them through its own generate path as it runs a diffusers pipeline. Timings are lower
bounds only (a sleep is never shorter); how fast a pool is belongs to benchmarks/pool.py."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from PIL import Image

from genloop.sdk import Client, Graph, Permanent, RunStatus
from genloop.workers.engine.generate import ImageSettings
from genloop.workers.engine.registry import ModelRegistry
from genloop.workers.engine.simulated import step_seconds_at
from genloop.workers.models.models_config import (
    SIMULATED_DESCRIPTION,
    ModelsConfig,
    ModelsConfigError,
)

GB = 1_000_000_000


def sim_config(tmp_path: Path, load: float = 0.0, names: tuple[str, ...] = ("sim-a",),
               resident: int = 2 * GB) -> Path:
    path = tmp_path / "models.toml"
    path.write_text("".join(
        f"[models.{name}]\nsteps = 4\nwidth = 48\nheight = 32\n\n"
        f"[models.{name}.simulated]\nload_seconds = {load}\n"
        f"step_seconds = {{ 1 = 0.02, 8 = 0.006 }}\nresident_bytes = {resident}\n\n"
        for name in names))
    return path


def test_a_config_declares_a_simulated_model_the_back_end_serves_and_describes(tmp_path):
    # Given an operator's config with a simulated entry; When it is read
    config = ModelsConfig.load(sim_config(tmp_path))
    sim = config.models["sim-a"].simulated
    # Then the name is served, described as a simulation, with its parameters as written
    assert config.names() == ["shapes", "sim-a", "tiny"]
    assert config.described() == {"sim-a": SIMULATED_DESCRIPTION}
    assert sim.step_seconds == {1: 0.02, 8: 0.006} and sim.resident_bytes == 2 * GB


def test_the_time_per_image_step_is_interpolated_between_the_given_batch_sizes(tmp_path):
    sim = ModelsConfig.load(sim_config(tmp_path)).models["sim-a"].simulated
    assert step_seconds_at(sim, 1) == 0.02
    assert step_seconds_at(sim, 4) == pytest.approx(0.02 - 0.014 * 3 / 7)
    assert step_seconds_at(sim, 8) == step_seconds_at(sim, 32) == 0.006


@pytest.mark.parametrize(("entry", "says"), [
    ("simulated = { load_seconds = 1, step_seconds = { 1 = 0 }, resident_bytes = 1 }",
     r"step_seconds\.1\n.*greater than 0"),
    ("simulated = { load_seconds = 1, step_seconds = { 0 = 0.1 }, resident_bytes = 1 }",
     r"step_seconds\.0\.\[key\]\n.*greater than or equal to 1"),
    ("simulated = { load_seconds = 1, step_seconds = {}, resident_bytes = 1 }",
     r"step_seconds\n.*at least 1 item"),
    ("simulated = { load_seconds = -1, step_seconds = { 1 = 0.1 }, resident_bytes = 1 }",
     r"load_seconds\n.*greater than or equal to 0"),
    ("simulated = { load_seconds = nan, step_seconds = { 1 = 0.1 }, resident_bytes = 1 }",
     r"load_seconds\n.*finite number"),
    ("simulated = { load_seconds = 1, step_seconds = { 1 = 0.1 } }",
     r"resident_bytes\n.*Field required"),
    ("simulated = { load_seconds = 1, step_seconds = { 1 = 0.1 }, resident_bytes = 1, x = 1 }",
     r"simulated\.x\n.*Extra inputs"),
    ('source = "org/model"\n'
     "simulated = { load_seconds = 1, step_seconds = { 1 = 0.1 }, resident_bytes = 1 }",
     "either loaded from a source or simulated; remove source or simulated"),
])
def test_a_bad_simulated_entry_is_refused_saying_what_is_wrong(tmp_path, entry, says):
    path = tmp_path / "models.toml"
    path.write_text(f"[models.sim]\n{entry}\n")
    with pytest.raises(ModelsConfigError, match=f"(?s)models.toml.*{says}"):
        ModelsConfig.load(path)


def test_a_built_in_name_cannot_be_simulated(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text("[models.tiny.simulated]\nload_seconds = 0\nstep_seconds = { 1 = 0.1 }\n"
                    "resident_bytes = 1\n")
    with pytest.raises(ModelsConfigError, match="built-in model 'tiny' cannot be simulated"):
        ModelsConfig.load(path)


def test_no_name_alone_makes_a_simulated_model(tmp_path):
    # Given registries with no simulated entry: an operator's config, and trusted code's none
    house = tmp_path / "house.toml"
    house.write_text('[models.house]\nsource = "org/model"\n')
    for models in (ModelsConfig.load(house), None):
        registry = ModelRegistry("cpu", models=models)
        # When a request names a simulation; Then no pipeline is made for it
        for name in ("sim-a", "simulated", '{"load_seconds": 0}'):
            with pytest.raises(Permanent, match="unknown model|neither a built-in"):
                registry.pipeline(name)
        assert registry.loads == {}


def test_a_load_takes_its_load_time_is_counted_and_has_an_identity_of_its_settings(tmp_path):
    # Given a registry of a config with a simulated model that loads in 0.3 s
    registry = ModelRegistry("cpu", models=ModelsConfig.load(sim_config(tmp_path, load=0.3)))
    # When it is loaded
    began = time.perf_counter()
    registry.pipeline("sim-a")
    took = time.perf_counter() - began
    # Then the load slept its time and was counted as a load of that model
    assert took >= 0.3 and registry.load_seconds["sim-a"] >= 0.3
    assert registry.loads == {"sim-a": 1} and registry.resident() == ["sim-a"]
    registry.pipeline("sim-a")
    assert registry.loads == {"sim-a": 1}  # resident: no second load
    # and its identity (part of every result key) changes with its settings
    other = ModelRegistry("cpu", models=ModelsConfig.load(sim_config(tmp_path, load=0.1)))
    assert registry.identity("sim-a").startswith("simulated:")
    assert registry.identity("sim-a") != other.identity("sim-a")


def test_resident_bytes_count_in_the_budget_so_the_least_recently_used_is_evicted(tmp_path):
    # Given a worker whose memory holds two of three simulated models
    config = ModelsConfig.load(sim_config(tmp_path, names=("sim-a", "sim-b", "sim-c")))
    registry = ModelRegistry("cpu", models=config, memory_budget=5 * GB)
    registry.pipeline("sim-a")
    registry.pipeline("sim-b")
    registry.pipeline("sim-a")  # sim-b is now the least recently used
    # When the third is loaded
    registry.pipeline("sim-c")
    # Then sim-b made room for it, and a later request for sim-b loads it again
    assert registry.resident() == ["sim-a", "sim-c"]
    assert registry.residency.used == 4 * GB
    registry.pipeline("sim-b")
    assert registry.loads == {"sim-a": 1, "sim-b": 2, "sim-c": 1}


def test_the_engine_batches_a_simulated_model_step_by_step_and_learns_its_step_time(tmp_path):
    registry = ModelRegistry("cpu", models=ModelsConfig.load(sim_config(tmp_path)))
    engine = registry.engine
    try:
        settings = ImageSettings(steps=5, guidance=5.0, width=40, height=24, cache="default")
        progress: list[tuple[int, int]] = []
        # When four candidates are generated in one request
        began = time.perf_counter()
        images = engine.generate("sim-a", ["a", "b", "a", "a"], [1, 2, 3, 1], settings,
                                 on_step=lambda done, total: progress.append((done, total)))
        took = time.perf_counter() - began
        # Then one batch slept each of its 5 steps for 4 images at the batch-of-4 rate
        per_step = step_seconds_at(registry.models.models["sim-a"].simulated, 4)
        assert engine.batcher.batches == [4]
        assert took >= 5 * 4 * per_step
        # and, the model's first batch being its warm-up, it is measured provisionally (no
        # images behind it) and the next batch's figure replaces it
        assert engine.step_seconds["sim-a"] >= per_step and engine.step_images == {"sim-a": 0}
        engine.step_seconds["sim-a"] = 99.0  # a warm-up that ran very slow
        engine.generate("sim-a", ["c"] * 4, [5, 6, 7, 8], settings)
        assert per_step <= engine.step_seconds["sim-a"] < 1.0
        assert engine.step_images == {"sim-a": 4}  # the estimate's weight for this worker
        assert progress[-1] == (20, 20) and len(progress) == 5
        # and each image is one plain colour of the requested size, fixed by prompt and seed
        assert {im.size for im in images} == {(40, 24)}
        assert all(len(im.getcolors()) == 1 for im in images)
        assert images[0].tobytes() == images[3].tobytes() != images[2].tobytes()
        # and an edit runs its steps x strength on the init images' size
        edit = ImageSettings(steps=8, guidance=5.0, width=40, height=24, kind="img2img",
                             strength=0.5)
        edited = engine.generate("sim-a", ["b"], [9], edit, init_images=images[:1])
        assert edited[0].size == (40, 24) and engine.batcher.batches == [4, 4, 1]
        assert engine.step_images == {"sim-a": 5}
    finally:
        engine.close()


def test_a_generate_node_on_a_simulated_model_runs_through_a_client(tmp_path):
    # Given a local back end serving an operator's config with a simulated model
    g = Graph()
    g.generate("a plain picture", model="sim-a", n=6, seed=3, id="gen")
    with Client.local(home=tmp_path / "home", threads=2,
                      models=sim_config(tmp_path)) as client:
        # When a generate node asks for six images of its default size
        result = client.submit(g).wait(timeout=120)
        pngs = [client.read_artifact(c.artifact) for c in result.items("gen")]
    # Then they are stored as the model's default size, one plain colour each
    assert result.status == RunStatus.SUCCEEDED
    pictures = [Image.open(io.BytesIO(png)) for png in pngs]
    assert [p.size for p in pictures] == [(48, 32)] * 6
    assert len({p.getpixel((0, 0)) for p in pictures}) == 6
