"""Model-aware routing on a pool of real ``genloop worker`` processes (workers/pool/routing.py):
each model's work goes to the worker that holds it, and a second copy is loaded for a backlog it
shortens by more than a load takes."""

from __future__ import annotations

import time

import pytest
from redis_util import POOL_DB, redis_url

from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.pool.pool_status import WorkerState, live_workers

pytestmark = pytest.mark.slow


@pytest.fixture
def two_models(tmp_path, resources):
    """A models config serving ``tiny`` (built in) and ``tiny2`` (its weights, from disk)."""
    weights = tmp_path / "tiny2"
    resources.models.pipeline("tiny").save_pretrained(weights)
    config = tmp_path / "models.toml"
    config.write_text(f'[models.tiny2]\nsource = "{weights}"\nsteps = 2\nwidth = 32\n'
                      'height = 32\n')
    return str(config)


def draw(model: str, n: int = 2, seed: int = 0, steps: int = 2) -> Graph:
    g = Graph()
    g.add("generate", id="draw", params={"prompt": "a red circle", "n": n, "seed": seed,
                                         "model": model, "steps": steps, "cache": "off"})
    return g


def settled_presence(client, after: float, workers: int) -> list[WorkerState]:
    """The live workers' records, once each was written after ``after``."""
    deadline = time.monotonic() + 15
    while True:
        records = live_workers(client, "genloop")
        if len(records) == workers and all(r.seen > after for r in records):
            return records
        assert time.monotonic() < deadline, records
        time.sleep(0.2)


def test_a_stream_alternating_two_models_on_two_workers_loads_each_once(
        pool, redis_client, two_models):
    for _ in range(2):
        pool.start(threads=2, args=("--models", two_models))
    pool.wait_ready(redis_client)
    with Client.connect(redis_url(POOL_DB)) as client:
        for i in range(8):
            run = client.submit(draw("tiny" if i % 2 else "tiny2", seed=i))
            assert run.wait(timeout=60).status == RunStatus.SUCCEEDED
    records = settled_presence(redis_client, time.time(), workers=2)
    loads = {model: sum(r.loads.get(model, 0) for r in records) for model in ("tiny", "tiny2")}
    assert loads == {"tiny": 1, "tiny2": 1}, [r.model_dump() for r in records]
    assert sorted(m for r in records for m in r.resident) == ["tiny", "tiny2"]


def test_a_backlog_a_second_copy_shortens_by_more_than_a_load_gets_one(pool, redis_client):
    pool.start(threads=1, args=("--preload", "tiny"))
    pool.wait_ready(redis_client)
    pool.start(threads=1)
    pool.wait_ready(redis_client)
    with Client.connect(redis_url(POOL_DB)) as client:
        # about 10 s of work for one worker: a second copy shortens it by more than a load
        runs = [client.submit(draw("tiny", n=32, seed=s, steps=4)) for s in range(0, 192, 32)]
        assert {r.wait(timeout=120).status for r in runs} == {RunStatus.SUCCEEDED}
    records = settled_presence(redis_client, time.time(), workers=2)
    assert [r.loads.get("tiny", 0) for r in records] == [1, 1], [r.model_dump() for r in records]
