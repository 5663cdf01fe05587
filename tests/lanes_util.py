"""The lanes scenario both back ends are tested with (tests/engine, tests/redis_pool)."""

from __future__ import annotations

from genloop.sdk import Client, Graph, Loop, RunStatus


def check_loop_overtakes_backlog(client: Client) -> None:
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
