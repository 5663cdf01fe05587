"""The Redis store's transition scripts on a Redis that forgot them (restarted, SCRIPT FLUSH)."""

from __future__ import annotations

import uuid

from contract.test_state_store import _create, _start
from redis_util import redis_url

from genloop.sdk.models import NodeStatus
from genloop.workers.stores.redis import RedisStateStore


def test_starts_sent_together_reload_the_scripts_a_restarted_redis_forgot():
    store = RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    try:
        # Given a run, and a Redis whose scripts are gone
        _create(store)
        store.client.script_flush()

        # When two instances start in one call (one pipeline)
        outcomes = store.start_instances([_start("a#0", "k0"), _start("a#1", "k1")])

        # Then both started
        assert [o for o, _ in outcomes] == ["started", "started"]
        assert {store.instance("r1", i).status for i in ("a#0", "a#1")} == {NodeStatus.RUNNING}
    finally:
        store.close()
