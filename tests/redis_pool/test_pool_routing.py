"""Model-aware routing on a pool of real ``genloop worker`` processes (workers/pool/routing.py):
each model's work goes to the worker that holds it, and a second copy is loaded for a backlog it
shortens by more than a load takes."""

from __future__ import annotations

import time

import pytest
from redis_util import POOL_DB, redis_url

from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.pool.pool_status import WorkerState, live_workers, workers_key

pytestmark = pytest.mark.slow


@pytest.fixture
def two_models(tmp_path):
    """A models config serving two simulated models (genloop.workers.engine.simulated) whose
    loads take 2 s and whose steps take 10 ms whatever else runs on the machine: a real model
    as small as ``tiny`` loads in under a second, and on a loaded machine its work's wait
    passes a load's length, for which another copy rightly pays."""
    config = tmp_path / "models.toml"
    config.write_text("".join(
        f"[models.{name}]\nsteps = 2\nwidth = 32\nheight = 32\n"
        f"[models.{name}.simulated]\nload_seconds = 2.0\nstep_seconds = {{ 1 = 0.01 }}\n"
        f"resident_bytes = 10_000_000\n" for name in ("sim-a", "sim-b")))
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
            run = client.submit(draw("sim-a" if i % 2 else "sim-b", seed=i))
            assert run.wait(timeout=60).status == RunStatus.SUCCEEDED
    records = settled_presence(redis_client, time.time(), workers=2)
    loads = {model: sum(r.loads.get(model, 0) for r in records) for model in ("sim-a", "sim-b")}
    assert loads == {"sim-a": 1, "sim-b": 1}, [r.model_dump() for r in records]
    assert sorted(m for r in records for m in r.resident) == ["sim-a", "sim-b"]


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


def test_a_worker_making_room_evicts_a_model_another_worker_holds_before_its_only_copy(
        pool, redis_client, tmp_path):
    # Given a worker with room for two of three simulated models, holding sim-b (least
    # recently used) then sim-a, and another live worker (a presence record) holding sim-a
    config = tmp_path / "models.toml"
    config.write_text("".join(
        f"[models.{name}]\nsteps = 1\nwidth = 32\nheight = 32\n"
        f"[models.{name}.simulated]\nload_seconds = 0.1\nstep_seconds = {{ 1 = 0.01 }}\n"
        f"resident_bytes = 10_000_000\n" for name in ("sim-a", "sim-b", "sim-c")))
    pool.start(threads=2, args=("--models", str(config), "--memory-budget", "0.025"))
    pool.wait_ready(redis_client)
    other = WorkerState(id="other", host="h", pid=1, queues=["gpu"], threads=1,
                        started=time.time(), seen=time.time() + 60, models=["sim-a"],
                        resident=["sim-a"])
    try:
        with Client.connect(redis_url(POOL_DB)) as client:
            for model in ("sim-b", "sim-a"):
                assert client.submit(draw(model, steps=1)).wait(timeout=60).status \
                    == RunStatus.SUCCEEDED
            redis_client.hset(workers_key("genloop"), other.id, other.model_dump_json())
            time.sleep(5 * 0.5)  # 5x how long a worker reuses its read of the pool's presence
            # When it loads sim-c
            assert client.submit(draw("sim-c", steps=1)).wait(timeout=60).status \
                == RunStatus.SUCCEEDED
    finally:
        redis_client.hdel(workers_key("genloop"), other.id)
    # Then it let sim-a go, which the pool still holds, and kept its only sim-b
    mine = next(r for r in settled_presence(redis_client, time.time(), workers=1))
    assert sorted(mine.resident) == ["sim-b", "sim-c"]
