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
from genloop.workers.pool.pool_status import WorkerState, mean_step_seconds, workers_key
from genloop.workers.pool.redis_fair_queue import RedisFairQueue
from genloop.workers.pool.routing import (
    AffinityGate,
    Router,
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
    state.setdefault("models", ["tiny"])
    record = WorkerState(id=worker, host="h", pid=1, queues=["gpu"], threads=2,
                         started=time.time(), seen=time.time(), **state)
    client.hset(workers_key(prefix), worker, record.model_dump_json())


def waiting(client, namespace: str, age: float, queue: str = ROUTED) -> None:
    """One message on a routed queue, sent ``age`` seconds ago."""
    broker = RedisBroker(client=client, namespace=namespace)
    broker.declare_queue(queue)
    message = dramatiq.Message(queue_name=queue, actor_name="a", args=(), kwargs={},
                               options={}, message_timestamp=int((time.time() - age) * 1000))
    broker.enqueue(message)


def gate(client, prefix: str, worker: str, **hands: object) -> AffinityGate:
    return AffinityGate(client, prefix, prefix, worker, {ROUTED: "tiny"}, lambda: hands)


def test_a_models_queue_name_is_a_queue_name_of_its_queue():
    assert routed_queue("gpu", "sd-1.5") == "gpu.m.sd-1.5"
    for odd in ("org/model", "DQ", "x.DQ", "naïve"):
        name = routed_queue("gpu", odd)
        assert name.startswith("gpu.m.h") and not name.endswith((".DQ", ".XQ"))
    assert routed_queue("gpu", "org/a") != routed_queue("gpu", "org/b")


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


def test_a_holder_takes_its_model_s_work_only_while_less_than_a_full_batch_waits(client, prefix):
    waiting(client, prefix, age=0.0)
    hands = {"resident": ["tiny"], "running": ("tiny", 8), "batch_limit": 32}
    assert gate(client, prefix, "w1", **hands, queued_images={"tiny": 16, "other": 8})(ROUTED)
    assert not gate(client, prefix, "w1", **hands, queued_images={"tiny": 24, "other": 8})(
        ROUTED)  # a full batch waits behind the running one: the rest stays on the queue
    # between batches, what waits is its next batch; before its first, it takes one message
    assert not gate(client, prefix, "w1", resident=["tiny"], batch_limit=32,
                    queued_images={"tiny": 32})(ROUTED)
    assert not gate(client, prefix, "w1", running=("tiny", 4), queued_images={"tiny": 4})(
        ROUTED)
    assert gate(client, prefix, "w1", resident=["tiny"])(ROUTED)


def measured(client, prefix: str, worker: str, model: str, engine_images: int) -> None:
    """A holder of ``model`` with ``engine_images`` in its engine, at 0.1 s an image (10
    steps of 10 ms), whose last load took 2 s."""
    presence(client, prefix, worker, models=["tiny", "other"], resident=[model],
             running=(model, 8), queued_images={model: engine_images - 8},
             default_steps={model: 10}, step_seconds={model: 0.01},
             load_seconds={model: 2.0})


def test_copies_are_added_while_one_more_shortens_the_model_s_work_by_more_than_a_load(
        client, prefix):
    # Given a holder with 6.4 s of work in its engine and a message waiting: a second server
    # pays (3.2 s each after a 2 s load), a third does not
    measured(client, prefix, "w0", "tiny", engine_images=64)
    waiting(client, prefix, age=0.0)
    takers = [w for w in ("w1", "w2", "w3") if gate(client, prefix, w)(ROUTED)]
    assert takers == ["w1"]
    # When its engine holds 33 s of work: one more pays while n(n + 1) < 16.5, so three
    for slot in range(3):
        client.delete(claim_key(prefix, "tiny", slot))
    measured(client, prefix, "w0", "tiny", engine_images=330)
    idle = ("w4", "w5", "w6", "w7", "w8")
    for worker in idle:  # live, with nothing in hand
        presence(client, prefix, worker)
    takers = [w for w in idle if gate(client, prefix, w)(ROUTED)]
    assert takers == ["w4", "w5", "w6"]


def test_an_idle_worker_takes_a_copy_of_the_model_with_the_most_work_for_each_server(
        client, prefix):
    other = routed_queue("gpu", "other")
    measured(client, prefix, "w0", "tiny", engine_images=64)
    measured(client, prefix, "w9", "other", engine_images=200)
    waiting(client, prefix, age=0.0)
    waiting(client, prefix, age=0.0, queue=other)
    routes = {ROUTED: "tiny", other: "other"}
    idle = AffinityGate(client, prefix, prefix, "w1", routes, dict)
    assert not idle(ROUTED) and idle(other)


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
    # And the model's work waits in a window of its own: threads joining the instance
    # queue's let in only its own work, and once they join the model's, its work too, which
    # is then no longer timed as held
    fair.join("w9", "gpu", threads=2, ttl=30)
    fair.pump("gpu")
    assert [c[0].node_id for c in sent] == ["pick"]
    assert fair.waiting("gpu") == 1
    fair.join("w9", ROUTED, threads=2, ttl=30)
    fair.pump(ROUTED)
    assert [c[0].node_id for c in sent] == ["pick", "draw"]
    assert client.zcard(held_since_key(prefix, ROUTED)) == 0 and fair.waiting("gpu") == 0


def test_a_draining_holder_holds_nothing(client, prefix):
    presence(client, prefix, "w2", resident=["tiny"], draining=True)
    waiting(client, prefix, age=0.0)
    assert gate(client, prefix, "w1")(ROUTED)


def test_a_model_s_step_time_weighs_each_worker_by_the_images_it_measured():
    # Given one worker that measured 0.01 s over 300 images and one whose only batch of 2
    # images ran slow (0.1 s: a cold start), and a third with no count (an older record)
    states = [{"step_seconds": {"tiny": 0.01}, "step_images": {"tiny": 300}},
              {"step_seconds": {"tiny": 0.1}, "step_images": {"tiny": 2}},
              {"step_seconds": {"tiny": 0.01}},
              {"step_seconds": {"other": 0.5}, "step_images": {"other": 10}},
              {"step_seconds": {"tiny": 0.3, "first": 0.2}, "step_images": {"tiny": 0, "first": 0}}]
    # Then the pool's figure is the images' mean, near the well-measured one, and a warm-up
    # batch's figure (no images counted) is left out
    assert mean_step_seconds("tiny", states) == pytest.approx((3.0 + 0.2 + 0.01) / 303)
    # unless nothing else measured the model
    assert mean_step_seconds("first", states) == pytest.approx(0.2)
    # and a model nobody measured has none
    assert mean_step_seconds("unseen", states) is None


def test_a_worker_between_batches_of_its_own_model_takes_no_copy_of_another(client, prefix):
    # Given a worker whose engine is empty for a moment, holding "other", and "tiny" held
    # elsewhere with 33 s of work, for which a copy pays
    other = routed_queue("gpu", "other")
    measured(client, prefix, "w0", "tiny", engine_images=330)
    waiting(client, prefix, age=0.0)
    routes = {ROUTED: "tiny", other: "other"}
    between = AffinityGate(client, prefix, prefix, "w1", routes, lambda: {"resident": ["other"]})
    # When work for "other" waits on its queue, then it stays with its own model
    waiting(client, prefix, age=0.0, queue=other)
    assert not between(ROUTED)
    # and as long as the fair queue holds some back for it
    client.delete(f"{prefix}:{other}")
    client.zadd(held_since_key(prefix, other), {"m1": time.time()})
    assert not between(ROUTED)
    # Then with none left for "other" it takes the copy
    client.delete(held_since_key(prefix, other))
    assert between(ROUTED)


def test_the_models_held_elsewhere_are_what_other_live_workers_have_in_memory(client, prefix):
    # Given this worker and three others: one holding a model, one loading another (running),
    # one draining (its models are going away with it)
    presence(client, prefix, "me", resident=["mine"])
    presence(client, prefix, "w1", resident=["tiny"])
    presence(client, prefix, "w2", running=("other", 4))
    presence(client, prefix, "w3", resident=["leaving"], draining=True)
    # Then eviction here may take "tiny" and "other" first, and nothing else
    assert gate(client, prefix, "me").held_elsewhere() == {"tiny", "other"}
