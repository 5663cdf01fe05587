"""A run's end reaches whoever waits on it when it is committed, not at the next poll: the
SDK's ``wait`` over HTTP (the gateway's long poll), on the embedded and the Redis back end;
many long polls are held at once, each on a thread of the gateway's wait pool."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from test_events import slow_chain

from genloop.sdk import Graph, Run

#: Goal: 20 ms (`benchmarks/latency.py` measures it). The test tells a wake from a poll (5 s
#: here), with room for a loaded 2-core test machine (0.28 s was seen on one).
LAG = 1.0


def one_node(label: str) -> Graph:
    g = Graph()
    g.add("gw-wait", params={"label": label, "sleep": 0.4}, id="a")
    return g


@pytest.mark.parametrize("graph", [one_node, slow_chain], ids=["one-node", "chain"])
def test_wait_returns_when_the_run_ends_not_at_the_next_poll(stack, graph):
    # Given a run that ends in under a second, and a waiter whose fallback poll is 5 s
    _, key = stack.tenant()
    client = stack.client(key)
    submitted = client.submit(graph(f"lag-{graph.__name__}"))
    run = Run(client.backend, submitted.info, poll_interval=5.0)
    # When it waits
    result = run.wait(timeout=30)
    returned = time.time()
    # Then it returns right after the run's end (a poll would have slept 5 s)
    assert result.status == "succeeded"
    assert returned - run.info.finished_at < LAG


def test_a_long_poll_is_held_until_its_wait_runs_out(stack):
    # Given a run that takes over a second
    _, key = stack.tenant()
    run = stack.client(key).submit(slow_chain("held"))
    headers = {"Authorization": f"Bearer {key}"}
    # When the status is asked for with wait=0.3
    started = time.monotonic()
    held = httpx.get(f"{stack.url}/v1/runs/{run.id}", params={"wait": 0.3}, headers=headers)
    # Then the answer comes after the wait, the run still going
    assert held.status_code == 200 and held.json()["status"] in ("pending", "running")
    assert time.monotonic() - started >= 0.3
    # And a longer wait is answered by the run's end
    done = httpx.get(f"{stack.url}/v1/runs/{run.id}", params={"wait": 20}, headers=headers,
                     timeout=30)
    assert done.json()["status"] == "succeeded"
    assert time.time() - done.json()["finished_at"] < LAG


def test_a_long_poll_on_another_tenants_run_is_a_404_at_once(stack):
    _, owner = stack.tenant()
    run = stack.client(owner).submit(slow_chain("other"))
    _, stranger = stack.tenant()
    started = time.monotonic()
    answer = httpx.get(f"{stack.url}/v1/runs/{run.id}", params={"wait": 20},
                       headers={"Authorization": f"Bearer {stranger}"}, timeout=30)
    assert answer.status_code == 404 and time.monotonic() - started < 5


def _in_wait(frame) -> bool:
    """Whether a thread's stack is inside the gateway service's ``wait`` (not ``wait_async``)."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith("service.py") and "wait" in code.co_name \
                and "async" not in code.co_name:
            return True
        frame = frame.f_back
    return False


def _threads_in_wait() -> int:
    """Threads now inside the gateway's ``wait`` (idle pool threads are not)."""
    return sum(map(_in_wait, sys._current_frames().values()))


def test_forty_long_polls_at_once_are_each_held_by_a_thread_of_the_gateways_wait_pool(stack):
    # Given a run that outlasts the waits, and more waiters than a default thread pool holds
    # (min(32, cores + 4)); the test's server runs in this process, its threads readable
    _, key = stack.tenant()
    client = stack.client(key)
    g = Graph()
    g.add("gw-wait", params={"label": "outlasts", "sleep": 60.0}, id="a")
    run = client.submit(g)
    headers = {"Authorization": f"Bearer {key}"}

    def long_poll(_: int) -> int:
        return httpx.get(f"{stack.url}/v1/runs/{run.id}", params={"wait": 25.0},
                         headers=headers, timeout=60).status_code

    # When forty clients long-poll it at once
    with ThreadPoolExecutor(40) as pool:
        answers = pool.map(long_poll, range(40))
        try:
            deadline = time.monotonic() + 20
            while _threads_in_wait() < 40 and time.monotonic() < deadline:
                time.sleep(0.05)
            # Then all forty are held at the same time, each on a thread of its own
            assert _threads_in_wait() == 40
        finally:
            run.cancel()  # the waits end with the run
        assert list(answers) == [200] * 40
