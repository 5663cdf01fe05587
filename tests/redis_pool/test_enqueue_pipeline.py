"""The Enqueuer sends a released map's messages in pipelined batches on a RedisBroker (a
10,000-item map sent one message per round trip), several instances to a message when many are
released at once."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from redis_util import redis_url

from genloop.workers.pool.broker import PIPELINE_MESSAGES, Enqueuer
from genloop.workers.runtime.chunks import MAX_CHUNK, MIN_MESSAGES, instances_of
from genloop.workers.stores.records import InstanceRecord
from genloop.workers.stores.redis_keys import PoolKeys


@pytest.fixture
def broker():
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    broker = RedisBroker(url=redis_url(), namespace=namespace)
    yield broker
    for key in broker.client.scan_iter(f"{namespace}*"):
        broker.client.delete(key)
    broker.close()


@pytest.fixture
def round_trips():
    """Socket writes to Redis from this thread (a pipeline is one), counted by the orchestration
    benchmark's counter."""
    spec = importlib.util.spec_from_file_location(
        "_bench_orchestration", Path(__file__).parents[2] / "benchmarks" / "orchestration.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with bench.round_trips() as writes:
        yield writes


def test_many_messages_go_in_a_few_round_trips_and_arrive_whole(broker, round_trips):
    n = 2 * PIPELINE_MESSAGES + 7
    instances = [InstanceRecord(run_id="run", instance_id=f"i{k}", node_id="each", seq=k,
                                queue="cpu", max_retries=k % 4) for k in range(n)]

    enqueue = Enqueuer(broker)
    # Not counted: the connection's set-up, and the broker's one-time look at Redis' limits.
    enqueue([i.model_copy(update={"queue": "warm-up"}) for i in instances[:2]])
    round_trips[0] = 0
    enqueue.send_chunks([[i] for i in instances])  # one message each

    # Three pipelines, each with the script-exists check redis-py makes before it.
    assert round_trips[0] <= 2 * 3
    client = redis.Redis.from_url(redis_url())
    queue = PoolKeys.dramatiq_queue(broker.namespace, "cpu")
    ids = [i.decode() for i in client.lrange(queue, 0, -1)]
    assert len(ids) == n
    messages = [dramatiq.Message.decode(client.hget(f"{queue}.msgs", i)) for i in ids]
    assert sorted(m.args[1] for m in messages) == sorted(i.instance_id for i in instances)
    by_id = {m.args[1]: m for m in messages}
    for inst in instances:
        message = by_id[inst.instance_id]
        assert list(message.args) == ["run", inst.instance_id]
        assert message.actor_name == "genloop.execute.cpu"
        assert message.options["max_retries"] == inst.max_retries
    assert len({m.options["redis_message_id"] for m in messages}) == n


def _sent(broker) -> list[dramatiq.Message]:
    client = redis.Redis.from_url(redis_url())
    queue = PoolKeys.dramatiq_queue(broker.namespace, "cpu")
    ids = [i.decode() for i in client.lrange(queue, 0, -1)]
    return [dramatiq.Message.decode(client.hget(f"{queue}.msgs", i)) for i in ids]


def test_a_large_release_goes_out_in_chunks_of_one_run_that_name_each_instance_once(broker):
    big = [InstanceRecord(run_id="big", instance_id=f"b{k}", node_id="each", seq=k, queue="cpu")
           for k in range(1000)]
    small = [InstanceRecord(run_id="small", instance_id=f"s{k}", node_id="each", seq=k,
                            queue="cpu") for k in range(MIN_MESSAGES + 3)]
    # When two runs' instances are released in one call
    Enqueuer(broker)(big[:500] + small + big[500:])
    messages = [instances_of(m.args) for m in _sent(broker)]
    # Then every instance is in exactly one message, each message holds one run's instances
    named = [(run, i) for run, ids in messages for i in ids]
    assert sorted(named) == sorted((i.run_id, i.instance_id) for i in big + small)
    big_chunks = [ids for run, ids in messages if run == "big"]
    assert all(ids[0].startswith("b") for ids in big_chunks)
    # And the large release pays one message per MAX_CHUNK instances
    assert len(big_chunks) == 1000 // MAX_CHUNK + 1
    # While a release too small to keep MIN_MESSAGES threads busy in chunks is one per instance
    assert sorted(len(ids) for run, ids in messages if run == "small") == [1] * len(small)


def test_an_interactive_run_s_messages_go_to_the_front_of_a_model_s_queue(broker):
    # Given a routed pool's model queue (a route to "gpu.m.tiny"), with batch work on it
    def route(queue, run_id, node_id, params):
        return "gpu.m.tiny" if queue == "gpu" else queue

    enqueue = Enqueuer(broker, route, interactive=lambda run_id: run_id.startswith("agent"))

    def inst(run: str, k: int, queue: str = "gpu") -> InstanceRecord:
        return InstanceRecord(run_id=run, instance_id=f"i{k}", node_id="draw", seq=k,
                              queue=queue)

    enqueue.send_chunks([[inst("campaign", k)] for k in range(3)])
    # When agents' runs send one message alone, then two in one pipeline, then one more
    enqueue.send_chunk([inst("agent-1", 0)])
    enqueue.send_chunks([[inst("campaign", 3)], [inst("agent-2", 0)], [inst("agent-3", 0)]])
    enqueue.send_chunk([inst("agent-4", 0)])
    # Then theirs are fetched first, in the order they were sent (a newer round does not
    # overtake an older one), the batch ones after them in their order
    client = redis.Redis.from_url(redis_url())
    queue = PoolKeys.dramatiq_queue(broker.namespace, "gpu.m.tiny")
    runs = [dramatiq.Message.decode(client.hget(f"{queue}.msgs", i)).args[0]
            for i in client.lrange(queue, 0, -1)]
    assert runs == ["agent-1", "agent-2", "agent-3", "agent-4",
                    "campaign", "campaign", "campaign", "campaign"]
    # And on a queue of interactive messages only, the next goes last
    client.delete(queue)
    for k in range(2):
        enqueue.send_chunk([inst(f"agent-{5 + k}", 0)])
    assert [dramatiq.Message.decode(client.hget(f"{queue}.msgs", i)).args[0]
            for i in client.lrange(queue, 0, -1)] == ["agent-5", "agent-6"]
    # And on an instance's own queue (nothing routed there) order is the sender's
    enqueue.send_chunk([inst("campaign", 9, queue="cpu")])
    enqueue.send_chunk([inst("agent-3", 0, queue="cpu")])
    assert [m.args[0] for m in _sent(broker)] == ["campaign", "agent-3"]
