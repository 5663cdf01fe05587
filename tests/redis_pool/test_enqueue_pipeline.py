"""The Enqueuer sends a released map's messages in pipelined batches on a RedisBroker: a
10,000-item map sent one message per round trip."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from redis_util import redis_url

from genloop.workers.broker import PIPELINE_MESSAGES, Enqueuer
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
    enqueue(instances)

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
