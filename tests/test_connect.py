"""``Client.connect``: the submitting process plans and enqueues, and builds no worker."""

from __future__ import annotations

import json

import pytest
import redis
from redis_util import DB, redis_url

from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.pool.broker import actor_name

#: A database of its own: the test reads the broker's queue, which the store tests don't use.
CONNECT_DB = DB + 5


@pytest.fixture
def clean_redis():
    client = redis.Redis.from_url(redis_url(CONNECT_DB))
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def test_connect_enqueues_without_declaring_actors_or_worker_middleware(clean_redis, tmp_path):
    # Given a Redis with no worker attached
    g = Graph()
    g.add("test-count", id="a", params={"log": str(tmp_path / "log")}, queue="cpu",
          max_retries=2)
    # When a client connects and submits (straight to the broker: the pool's fair queue, its
    # default, would hold the message until a worker says it has a free thread)
    with Client.connect(redis_url(CONNECT_DB), artifacts=f"file://{tmp_path}/art",
                        fair=False) as client:
        run = client.submit(g)
        broker = client.backend.broker
        actors = broker.get_declared_actors()
        middleware = {type(m).__name__ for m in broker.middleware}
        status = run.status().status
    # Then the client declared no actor and added none of the worker's middleware...
    assert actors == set()
    assert not middleware & {"AttemptOutcomes", "OutboxSweeper", "CurrentMessage", "FairRelease"}
    # ...and the instance's message waits on its queue, for the worker's actor of that queue
    ids = clean_redis.lrange("dramatiq:cpu", 0, -1)
    messages = [json.loads(clean_redis.hget("dramatiq:cpu.msgs", i)) for i in ids]
    assert [(m["actor_name"], m["args"], m["options"]["max_retries"]) for m in messages] == [
        (actor_name("cpu"), [run.id, "a"], 2)]
    assert status in (RunStatus.PENDING, RunStatus.RUNNING)
