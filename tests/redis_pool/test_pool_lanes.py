"""Lanes on a Redis pool of real worker processes: an agent's loop overtakes a batch backlog
queued before it (the backlog flows into the workers' engines, which serve interactive work
first)."""

from __future__ import annotations

import pytest
from lanes_util import check_loop_overtakes_backlog
from redis_util import POOL_DB, redis_url

from genloop.sdk import Client

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("workers", [1, 2])
def test_an_agents_loop_finishes_before_a_batch_backlog_queued_ahead_of_it(pool, redis_client,
                                                                            workers):
    # Two workers both holding the model: routing leaves none of it waiting on the queue (a
    # FIFO, where the loop would wait behind the backlog)
    for _ in range(workers):
        pool.start(threads=2, lease_ttl=30.0,
                   args=("--preload", "tiny") if workers > 1 else ())
    pool.wait_ready(redis_client)
    with Client.connect(redis_url(POOL_DB)) as client:
        check_loop_overtakes_backlog(client)
