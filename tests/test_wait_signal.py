"""``Run.wait`` in process is woken by the run's end (the store's watch), not by its poll."""

from __future__ import annotations

import asyncio
import time

from genloop.sdk import AsyncClient, AsyncRun, Graph, Run

#: Goal: 20 ms (`benchmarks/latency.py` measures it); the margin is for a loaded test machine.
LAG = 0.25


def _sleepy(tmp_path, nodes: int) -> Graph:
    g, prev = Graph(), None
    for i in range(nodes):
        prev = g.add("test-count", id=f"n{i}", inputs=[prev] if prev else [],
                     params={"log": str(tmp_path / "log"), "sleep": 0.3})
    return g


def test_wait_returns_when_the_run_ends_not_at_the_next_poll(client, tmp_path):
    for nodes in (1, 3):  # a run ended by the scripted finish, and by a run transaction
        # Given a run under a second long and a waiter whose fallback poll is 5 s
        submitted = client.submit(_sleepy(tmp_path, nodes))
        run = Run(client.backend, submitted.info, poll_interval=5.0)
        # When it waits, Then it returns right after the run's end
        assert run.wait(timeout=30).status == "succeeded"
        assert time.time() - run.info.finished_at < LAG


def test_async_wait_returns_when_the_run_ends(tmp_path, resources):
    async def main() -> float:
        async with AsyncClient.local(home=tmp_path / "home", threads=2,
                                     resources=resources) as aclient:
            submitted = await aclient.submit(_sleepy(tmp_path, 2))
            run = AsyncRun(aclient.backend, submitted.info, poll_interval=5.0)
            await run.wait(timeout=30)
            return time.time() - run.info.finished_at

    assert asyncio.run(main()) < LAG


def test_a_cancelled_run_wakes_its_waiter(client, tmp_path):
    g = Graph()
    g.add("test-count", params={"log": str(tmp_path / "log"), "sleep": 30})
    submitted = client.submit(g)
    run = Run(client.backend, submitted.info, poll_interval=5.0)
    time.sleep(0.3)
    run.cancel()
    assert run.wait(timeout=30).status == "cancelled"
    assert time.time() - run.info.finished_at < LAG


def test_following_events_ends_when_the_run_ends_not_at_the_next_poll(client, tmp_path):
    # Given a run under a second long, followed with a fallback poll of 5 s
    submitted = client.submit(_sleepy(tmp_path, 2))
    run = Run(client.backend, submitted.info, poll_interval=5.0)
    # When its events are followed to the end, Then the last arrives right after the end
    last = list(run.events())[-1]
    assert last.type == "run.succeeded" and time.time() - last.time < LAG


def test_async_follow_ends_when_the_run_ends(tmp_path, resources):
    # The agent tools follow a run's events this way while they wait
    async def main() -> float:
        async with AsyncClient.local(home=tmp_path / "home", threads=2,
                                     resources=resources) as aclient:
            submitted = await aclient.submit(_sleepy(tmp_path, 2))
            run = AsyncRun(aclient.backend, submitted.info, poll_interval=5.0)
            events = [event async for event in run.events()]
            assert events[-1].type == "run.succeeded"
            return time.time() - events[-1].time

    assert asyncio.run(main()) < LAG
