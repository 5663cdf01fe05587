"""``AsyncClient.local``: the asyncio API over the embedded back end (calls run in threads)."""

from __future__ import annotations

import asyncio

from genloop.sdk import AsyncClient, Graph, RunStatus


def test_async_client_local_runs_follows_and_cancels(tmp_path, resources):
    log = str(tmp_path / "log")
    g = Graph()
    a = g.add("test-count", params={"log": log, "value": 2}, id="a")
    g.add("test-count", inputs=[a], params={"log": log, "value": 3}, id="b")
    slow = Graph()
    slow.add("test-count", params={"log": log, "sleep": 10.0}, id="slow")

    async def main():
        async with AsyncClient.local(tmp_path / "home", resources=resources) as client:
            run = await client.submit(g, idempotency_key="once")
            events = [e async for e in run.events()]
            result = await run.wait(timeout=30)
            again = await client.submit(g, idempotency_key="once")
            page = [e async for e in (await client.get(run.id)).events(follow=False)]
            stopping = await client.submit(slow)
            await stopping.cancel()
            cancelled = await stopping.wait(timeout=10)
            return run, events, result, again, page, cancelled

    run, events, result, again, page, cancelled = asyncio.run(main())
    assert result.status == RunStatus.SUCCEEDED
    assert result.items("b")[0]["value"] == 5
    assert events[-1].type == "run.succeeded" and events == page
    assert again.id == run.id
    assert cancelled.status == RunStatus.CANCELLED
