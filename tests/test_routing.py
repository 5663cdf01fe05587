"""Model-aware routing's parts on the test Redis (workers/pool/routing.py): which queue a sender
puts work on, and when a worker's gate lets it fetch from a model's queue; the pool's behaviour
with real worker processes is in tests/redis_pool/test_pool_routing.py."""

from __future__ import annotations

import time
import uuid

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from redis_util import redis_url

from genloop.sdk.graph import Node
from genloop.workers.pool.pool_status import WorkerState, workers_key
from genloop.workers.pool.redis_fair_queue import RedisFairQueue
from genloop.workers.pool.routing import (
    AffinityGate,
    Router,
    base_queue,
    claim_key,
    held_since_key,
    routed_queue,
)
from genloop.workers.stores.records import InstanceRecord

ROUTED = routed_queue("gpu", "tiny")


@pytest.fixture
def client():
    c = redis.Redis.from_url(redis_url())
    yield c
    c.close()


@pytest.fixture
def prefix(client):
    p = f"route-{uuid.uuid4().hex[:8]}"
    yield p
    for key in client.scan_iter(f"{p}*"):
        client.delete(key)


def presence(client, prefix: str, worker: str, **state: object) -> None:
    record = WorkerState(id=worker, host="h", pid=1, queues=["gpu"], threads=2,
                         started=time.time(), seen=time.time(), models=["tiny"], **state)
    client.hset(workers_key(prefix), worker, record.model_dump_json())


def waiting(client, namespace: str, age: float) -> None:
    """One message on the routed queue, sent ``age`` seconds ago."""
    broker = RedisBroker(client=client, namespace=namespace)
    broker.declare_queue(ROUTED)
    message = dramatiq.Message(queue_name=ROUTED, actor_name="a", args=(), kwargs={},
                               options={}, message_timestamp=int((time.time() - age) * 1000))
    broker.enqueue(message)


def gate(client, prefix: str, worker: str, **hands: object) -> AffinityGate:
    return AffinityGate(client, prefix, prefix, worker, {ROUTED: "tiny"}, lambda: hands)


def test_a_models_queue_name_is_a_queue_name_and_leads_back_to_its_queue():
    assert routed_queue("gpu", "sd-1.5") == "gpu.m.sd-1.5"
    for odd in ("org/model", "DQ", "x.DQ", "naïve"):
        name = routed_queue("gpu", odd)
        assert name.startswith("gpu.m.h") and not name.endswith((".DQ", ".XQ"))
        assert base_queue(name) == "gpu"
    assert routed_queue("gpu", "org/a") != routed_queue("gpu", "org/b")
    assert base_queue("cpu") == "cpu"


def test_a_sender_routes_generate_work_on_the_generate_queue_only(client, prefix):
    nodes = {n.id: n for n in (
        Node(id="draw", op="generate", params={"model": "tiny"}),
        Node(id="bare", op="generate", params={"prompt": "x"}),
        Node(id="mine", op="my-op", params={"model": "tiny"}),
        Node(id="pick", op="select"))}
    router = Router(client, prefix, "gpu", lambda run, node: nodes.get(node))

    assert router("gpu", "r", "draw", {}) == ROUTED  # the node's model
    assert router("gpu", "r", "draw", {"model": "sd"}) == routed_queue("gpu", "sd")  # patched
    assert router("gpu-big", "r", "draw", {}) == "gpu-big"
    assert router("gpu", "r", "bare", {}) == "gpu"  # no model named: the shared queue
    assert router("gpu", "r", "mine", {}) == "gpu"  # a model param, not generate
    assert router("cpu", "r", "pick", {}) == "cpu"
    assert router("gpu", "r", "gone", {}) == "gpu"
    # the sweeper's backlog counts what waits on them
    assert Router.queues(client, prefix, "gpu") == [routed_queue("gpu", "sd"), ROUTED]


def test_a_worker_takes_its_own_model_and_an_empty_queue_without_asking_redis(client, prefix):
    assert gate(client, prefix, "w1", resident=["tiny"])(ROUTED)
    assert gate(client, prefix, "w1", running=("tiny", 4))(ROUTED)  # loading it
    assert gate(client, prefix, "w1", resident=["other"], running=("other", 8))(ROUTED)
    assert gate(client, prefix, "w1")("cpu")  # no model's queue


def test_an_idle_worker_claims_a_cold_model_and_others_leave_it(client, prefix):
    waiting(client, prefix, age=0.0)
    first, second = gate(client, prefix, "w1"), gate(client, prefix, "w2")

    assert first(ROUTED)
    assert client.get(claim_key(prefix, "tiny", 0)) == b"w1"
    assert first(ROUTED)  # its claim makes the model its own
    assert not second(ROUTED)


def test_a_busy_worker_takes_a_cold_model_only_once_its_work_waited_a_load(client, prefix):
    presence(client, prefix, "w2", resident=["other"], load_seconds={"tiny": 2.0})
    busy = {"resident": ["other"], "running": ("other", 8)}
    waiting(client, prefix, age=0.5)
    assert not gate(client, prefix, "w1", **busy)(ROUTED)
    waiting(client, prefix + "-old", age=3.0)
    old = AffinityGate(client, prefix, prefix + "-old", "w1", {ROUTED: "tiny"}, lambda: busy)
    try:
        assert old(ROUTED)
    finally:
        for key in client.scan_iter(f"{prefix}-old*"):
            client.delete(key)


def test_a_second_copy_only_for_an_idle_worker_and_work_that_waited_longer_than_a_load(
        client, prefix):
    presence(client, prefix, "w2", resident=["tiny"], running=("tiny", 8),
             load_seconds={"tiny": 2.0})
    waiting(client, prefix, age=0.5)
    assert not gate(client, prefix, "w1")(ROUTED)  # held elsewhere, a load would not pay

    client.delete(f"{prefix}:{ROUTED}")
    waiting(client, prefix, age=3.0)
    assert not gate(client, prefix, "w1", running=("other", 4))(ROUTED)  # its own work first
    assert gate(client, prefix, "w1")(ROUTED)
    assert not gate(client, prefix, "w3")(ROUTED)  # one new copy for one load's worth of wait


def test_copies_are_added_in_proportion_to_how_long_the_work_waits(client, prefix):
    presence(client, prefix, "w0", resident=["tiny"], running=("tiny", 8),
             load_seconds={"tiny": 2.0})
    waiting(client, prefix, age=6.5)  # three loads' worth
    takers = [w for w in ("w1", "w2", "w3", "w4", "w5") if gate(client, prefix, w)(ROUTED)]
    assert takers == ["w1", "w2", "w3"]


def test_work_held_back_by_the_fair_queue_counts_as_waiting_for_its_model(client, prefix):
    # Given a holder, and one fresh message on its model's queue: a copy would not pay
    presence(client, prefix, "w2", resident=["tiny"], running=("tiny", 8),
             load_seconds={"tiny": 2.0})
    waiting(client, prefix, age=0.1)
    assert not gate(client, prefix, "w1")(ROUTED)
    # When more of its work has waited 3 s behind the fair queue's window (no thread joined)
    sent: list = []
    fair = RedisFairQueue(client, lambda chunk, delay: sent.append(chunk) or "id",
                          tenant_of=lambda run: run, prefix=prefix,
                          clock=lambda: time.time() - 3.0,
                          queue_of=lambda chunk: ROUTED if chunk[0].node_id == "draw" else "gpu")
    fair([InstanceRecord(run_id="r", node_id=node, instance_id=f"{node}#0", seq=0, queue="gpu")
          for node in ("draw", "pick")])
    assert sent == [] and client.zcard(held_since_key(prefix, ROUTED)) == 1
    # Then an idle worker takes a copy: the backlog is older than a load
    assert gate(client, prefix, "w1")(ROUTED)
    # And work let in through the window is no longer timed as held
    fair.join("w9", "gpu", threads=2, ttl=30)
    fair.pump("gpu")
    assert len(sent) == 2 and client.zcard(held_since_key(prefix, ROUTED)) == 0
    assert not client.exists(f"{prefix}:fair:gpu:route")


def test_a_draining_holder_holds_nothing(client, prefix):
    presence(client, prefix, "w2", resident=["tiny"], draining=True)
    waiting(client, prefix, age=0.0)
    assert gate(client, prefix, "w1")(ROUTED)
