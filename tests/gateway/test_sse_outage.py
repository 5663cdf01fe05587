"""An event stream whose store goes down ends cleanly: the frames so far, then a comment saying
to reconnect, and no exception mid-response (which cut streams off with a traceback)."""

from __future__ import annotations

import asyncio
import time

from genloop.gateway.sse import event_stream
from genloop.sdk.errors import StoreError
from genloop.sdk.models import Event


def test_a_store_outage_ends_the_stream_with_a_reconnect_comment():
    calls = 0

    async def fetch(after: int) -> list[Event]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise StoreError("redis: connection refused")
        return [Event(id=1, run_id="r", type="run.running", time=time.time())]

    async def ended(pause: float) -> bool:
        return False

    async def frames() -> list[bytes]:
        return [f async for f in event_stream(fetch, ended, 0, poll=0.01)]

    got = asyncio.run(frames())

    assert got[0] == b"retry: 1000\n\n" and got[1].startswith(b"id: 1\nevent: run.running")
    assert got[-1] == b": the store is unavailable; reconnect with Last-Event-ID\n\n"
