"""A Redis outage inside a run transaction reaches the caller as ``StoreError`` (the gateway's
503), not as redis-py's own exception (a 500)."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
import redis
from redis_util import redis_url

from genloop.gateway.errors import to_problem
from genloop.sdk.errors import StoreError
from genloop.workers.stores import InstanceRecord, NodeRecord, RunRecord, RunSpecRecord
from genloop.workers.stores.redis import RedisStateStore


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@pytest.fixture
def store():
    s = RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    run = RunRecord(id="r1", spec_hash="h", pending_nodes=1, created_at=time.time())
    s.create_run(run, RunSpecRecord(spec={}, graph={}),
                 [NodeRecord(run_id="r1", node_id="a", pending_instances=1)],
                 [InstanceRecord(run_id="r1", instance_id="a#0", node_id="a", seq=0)])
    yield s
    s.close()


def _lose_redis(store: RedisStateStore) -> None:
    store.client.connection_pool.disconnect()
    store.client.connection_pool = redis.ConnectionPool(host="127.0.0.1", port=_dead_port())


@pytest.mark.parametrize("read", [
    lambda tx: tx.run(), lambda tx: tx.node("a"), lambda tx: tx.instance("a#0"),
    lambda tx: tx.instances("a"), lambda tx: tx.ended_counts(),
])
def test_a_read_inside_a_transaction_raises_store_error_when_redis_is_gone(store, read):
    with pytest.raises(StoreError) as caught, store.transaction("r1") as tx:
        _lose_redis(store)  # after the transaction took its lock
        read(tx)
    assert to_problem(caught.value).status == 503
