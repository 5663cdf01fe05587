"""A draft loop on an operator's Flux folder through a pool of real ``genloop worker``
processes: drafts, then img2img finishes, with the default step cache (First-Block Cache). Its
finishes failed on every worker with ``No cache context is set``, retried 4x, and came out at
Flux's 256 px default instead of the configured size. The workers publish the modes Flux runs,
so a client refuses another at submit."""

from __future__ import annotations

import io

import open_clip
import pytest
import torch
from engine.arch_util import save_pipeline
from PIL import Image
from redis_util import POOL_DB, redis_url

from genloop.evaluators.openclip import register_tiny_config
from genloop.sdk import Client, GraphError, Loop, RunStatus

pytestmark = pytest.mark.slow


def test_a_flux_draft_loop_finishes_its_drafts_on_a_pool(pool, redis_client, tmp_path):
    register_tiny_config("tiny-clip-v1")
    torch.save(open_clip.create_model("tiny-clip-v1", pretrained=None).state_dict(),
               tmp_path / "judge.pt")
    config = tmp_path / "models.toml"
    config.write_text(f'[models.house-flux]\nsource = "{save_pipeline("flux", tmp_path)}"\n'
                      'width = 64\nheight = 64\nsteps = 8\n\n'
                      '[evaluators.judge]\nkind = "open_clip"\narchitecture = "tiny-clip-v1"\n'
                      'checkpoint = "./judge.pt"\n')
    pool.start(args=("--models", str(config)))
    pool.wait_ready(redis_client)

    with Client.connect(redis_url(POOL_DB), artifacts=f"file://{tmp_path / 'artifacts'}") as c:
        modes = c.schema().served.cache_modes
        with pytest.raises(GraphError, match="cannot run cache mode 'deepcache'"):
            c.submit(Loop(prompt="a cat", model="house-flux", evaluator="judge",
                          cache="deepcache"))
        result = c.submit(Loop(prompt="a red circle", model="house-flux", evaluator="judge",
                               refiner="draft", candidates=2, rounds=2,
                               steps=8)).wait(timeout=300)
        finished = result.items("round-2/generate")
        sizes = {Image.open(io.BytesIO(c.read_artifact(f.artifact))).size for f in finished}

    assert modes == {"house-flux": ["default", "off", "fbcache", "taylorseer"]}
    assert result.status == RunStatus.SUCCEEDED and not result.failures, result.failures
    assert [f.init_image is not None for f in finished] == [True, True]
    assert sizes == {(64, 64)}
