"""Fair queuing: tenants take turns in front of the broker, so one tenant's small run is not
stuck behind another's large one (a loose, order-based bound; timings are in
benchmarks/fairness.py)."""

from __future__ import annotations

import time

import httpx
from pydantic import BaseModel
from server import LiveServer

from genloop.sdk import Graph
from genloop.sdk.models import NodeStatus
from genloop.workers import op
from genloop.workers.embedded import EmbeddedBackend
from genloop.workers.fair_queue import FairEnqueuer
from genloop.workers.gateway import SqliteGatewayStore, create_app
from genloop.workers.stores.records import InstanceRecord


class ShardParams(BaseModel):
    n: int = 1
    seed: int = 0
    shard_size: int = 4
    first: int = 0
    salt: str = ""


class Made(BaseModel):
    index: int


@op("fair-image", params=ShardParams, output=Made, queue="gpu")
def fair_image(params: ShardParams, inputs: list, ctx) -> list[Made]:
    """Shards like generate; 10 ms per image, so a 96-image run takes a while."""
    time.sleep(params.n * 0.01)
    return [Made(index=params.first + i) for i in range(params.n)]


def inst(run: str, i: int) -> InstanceRecord:
    return InstanceRecord(run_id=run, node_id="n", instance_id=f"n#{i}", seq=i, queue="gpu")


def test_tenants_take_turns_within_the_window():
    # Given a window of one message and tenant a's three messages waiting before b's one
    sent: list[str] = []
    fair = FairEnqueuer(lambda i, delay: sent.append(f"{i.run_id}{i.instance_id}") or
                        sent[-1], window=1, tenant_of=lambda run: run)
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    fair([inst("b", 0)])
    assert sent == ["an#0"]
    # When messages finish one by one, then b's goes second, not fourth
    for _ in range(3):
        fair.finished("gpu", sent[-1])
    assert sent == ["an#0", "bn#0", "an#1", "an#2"]
    # And a duplicate send of a waiting instance is dropped
    fair([inst("c", 0), inst("c", 0)])
    fair.finished("gpu", sent[-1])
    assert sent[-1] == "cn#0" and fair.waiting() == 0


def test_a_small_run_finishes_before_most_of_another_tenants_large_one(tmp_path):
    backend = EmbeddedBackend(tmp_path / "home", threads=2, fair_window=2)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    big_key, small_key = store.create_key("big"), store.create_key("small")
    try:
        with LiveServer(create_app(backend, store)) as server:
            def submit(key: str, n: int) -> str:
                g = Graph()
                g.add("fair-image", params={"n": n, "salt": key}, id="gen")
                response = httpx.post(f"{server.url}/v1/runs", content=g.model_dump_json(),
                                      headers={"Authorization": f"Bearer {key}",
                                               "Content-Type": "application/json"})
                assert response.status_code == 201, response.text
                return str(response.json()["id"])

            # Given another tenant's 96-image run (24 shards) in flight
            big = submit(big_key, 96)
            # When a tenant submits a 1-image run just after it
            small = submit(small_key, 1)
            deadline = time.monotonic() + 60
            while not backend.get(small).status.terminal:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            # Then it ended while most of the large run's shards had not run yet (FIFO order
            # would have run all 24 first)
            done = [i for i in backend.store.instances(big)
                    if i.status == NodeStatus.SUCCEEDED]
            assert len(done) < 12, f"{len(done)} of 24 shards ran first"
            assert backend.get(small).status == "succeeded"
            while not backend.get(big).status.terminal:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert backend.get(big).status == "succeeded"
    finally:
        backend.close()
        store.close()
