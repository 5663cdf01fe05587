"""An operator's own judges on a pool of real ``genloop worker`` processes: published with the
models, so a client and a gateway that never imported the judge's module accept it; and a
config that cannot be served stops the workers at start, so a submit naming it is refused."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import open_clip
import pytest
import torch
from fastapi.testclient import TestClient
from redis_util import POOL_DB, redis_url

from genloop.evaluators.openclip import register_tiny_config
from genloop.sdk import Client, Graph, GraphError, RunStatus

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def judges_config(tmp_path) -> tuple[Path, Path]:
    """A models config with a random open_clip checkpoint and a module judge whose module
    only the workers can import; and the folder holding that module."""
    register_tiny_config("tiny-clip-v1")
    torch.save(open_clip.create_model("tiny-clip-v1", pretrained=None).state_dict(),
               tmp_path / "house-clip.pt")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "house_judges.py").write_text(textwrap.dedent('''
        from genloop.evaluators import evaluator

        @evaluator("house-style", needs_text=False)
        def house_style(images, text):
            """How much of our house red an image has."""
            return [sum(p[0] for p in im.convert("RGB").getdata()) / 255 for im in images]
    '''))
    config = tmp_path / "models.toml"
    config.write_text('[evaluators.house-clip]\nkind = "open_clip"\narchitecture = '
                      '"tiny-clip-v1"\ncheckpoint = "./house-clip.pt"\n\n'
                      '[evaluators.house-style]\nkind = "module"\nmodule = "house_judges"\n')
    return config, modules


def scored(evaluator: str) -> Graph:
    g = Graph()
    g.generate("a red circle", n=2, model="tiny", id="gen")
    g.score("gen", text="a red circle", evaluator=evaluator, id="score")
    return g


def test_judges_from_the_workers_config_reach_a_client_and_gateway_that_never_imported_them(
        pool, redis_client, judges_config, tmp_path):
    from genloop.gateway import SqliteGatewayStore, create_app
    from genloop.workers.backends.redis_backend import RedisBackend

    config, modules = judges_config
    # Given a pool started on the config, its judge module on the workers' path only
    pool.start(env={"PYTHONPATH": f"{TESTS}:{modules}"}, args=("--models", str(config)))
    pool.wait_ready(redis_client)
    assert "house_judges" not in sys.modules
    # When a client connects, Then it lists both judges and runs graphs scoring with them
    with Client.connect(redis_url(POOL_DB)) as client:
        listed = {j.name: j for j in client.schema().served.evaluators}
        assert listed["house-style"].description == "How much of our house red an image has."
        assert listed["house-clip"].needs == []
        for judge in ("house-clip", "house-style"):
            result = client.submit(scored(judge)).wait(timeout=120)
            assert result.status == RunStatus.SUCCEEDED, result.failures
    # And a gateway on the pool lists them to a tenant, and not hf-clip (its path is never
    # a tenant's to give), accepting the one and refusing the other at submit
    backend = RedisBackend(redis_url(POOL_DB))
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    try:
        http = TestClient(create_app(backend, store))
        auth = {"Authorization": f"Bearer {store.create_key('acme')}"}
        names = [j["name"] for j in http.get("/v1/schema", headers=auth).json()["served"][
            "evaluators"]]
        assert {"house-clip", "house-style"} <= set(names) and "hf-clip" not in names
        ok = http.post("/v1/runs", json=scored("house-style").model_dump(), headers=auth)
        refused = http.post("/v1/runs", json=scored("hf-clip").model_dump(), headers=auth)
        assert ok.status_code == 201, ok.text
        assert refused.status_code == 422 and "unknown evaluator 'hf-clip'" in refused.text
    finally:
        backend.close()
        store.close()


def test_a_config_that_cannot_be_served_stops_the_workers_and_submits_are_refused(
        pool, redis_client, tmp_path):
    # Given a config naming a folder that does not exist
    config = tmp_path / "models.toml"
    config.write_text(f'[models.house]\nsource = "{tmp_path / "nowhere"}"\n')
    log = tmp_path / "worker.log"
    # When a worker starts on it, Then it exits at once naming the problem with its path
    proc = pool.start(args=("--models", str(config)), log=log)
    assert proc.wait(timeout=120) == 1
    assert f"models.house: {tmp_path / 'nowhere'}: no such folder" in log.read_text()
    # And the model was never published, so a submit naming it is refused (nothing runs)
    with Client.connect(redis_url(POOL_DB), artifacts=f"file://{tmp_path}") as client:
        g = Graph()
        g.generate("a red circle", n=1, model="house", id="gen")
        with pytest.raises(GraphError, match="house"):
            client.submit(g)
