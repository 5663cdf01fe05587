"""Lanes on a Redis pool of real worker processes: an agent's loop overtakes a batch backlog
queued before it (the backlog flows into the worker's engine, which serves interactive work
first)."""

from __future__ import annotations

import pytest
from redis_util import POOL_DB, redis_url

from genloop.sdk import Client, Graph, Loop, RunStatus

pytestmark = pytest.mark.slow


def test_an_agents_loop_finishes_before_a_batch_backlog_queued_ahead_of_it(pool, redis_client):
    pool.start(threads=2, lease_ttl=30.0)
    pool.wait_ready(redis_client)
    with Client.connect(redis_url(POOL_DB)) as client:
        # Given 200 batch-lane images queued first, one instance each
        g = Graph(priority="batch")
        g.generate("a backlog of ads", model="tiny", n=200, seed=0, steps=4, shard_size=1)
        backlog = client.submit(g)
        # When an agent's loop (interactive by default) is submitted after them
        loop = client.submit(Loop(prompt="a red circle", model="tiny", candidates=4, rounds=2,
                                  steps=4))
        # Then it ends while the backlog is still being drawn, which still finishes whole
        assert loop.wait(timeout=120).status == RunStatus.SUCCEEDED
        assert backlog.status().status == RunStatus.RUNNING
        assert backlog.wait(timeout=300).status == RunStatus.SUCCEEDED
        assert backlog.result().compute.images == 200
