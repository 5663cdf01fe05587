"""A run's events as server-sent events, from the back end's ``events``.

Events are read in pages; between two empty pages the stream waits on the run's end (the back
end's ``wait``, woken when the end commits), so the last event goes out the moment the run ends,
and other events within the poll's pause.

Each frame carries the event's id, so a client that loses the connection reconnects with
``Last-Event-ID`` and gets exactly the events after it. The stream ends after the run's last
event, or when its caller may no longer read it (a revoked key, an ended console session:
checked every ``recheck`` seconds); a silent stream sends a comment now and then so proxies keep
it open.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

from genloop.sdk.backend import TERMINAL_EVENTS
from genloop.sdk.errors import StoreError
from genloop.sdk.models import Event
from genloop.sdk.wire import encode_event

Fetch = Callable[[int], Awaitable[list[Event]]]
#: ``ended(pause)``: whether the run has ended, waiting up to ``pause`` s for it to end.
Ended = Callable[[float], Awaitable[bool]]
#: Whether the caller may still read the stream.
Allowed = Callable[[], Awaitable[bool]]


async def event_stream(
    fetch: Fetch, ended: Ended, after: int, *, follow: bool = True, poll: float = 0.05,
    max_poll: float = 0.5, keepalive: float = 10.0, allowed: Allowed | None = None,
    recheck: float = 1.0,
) -> AsyncIterator[bytes]:
    """Frames for the events after ``after``; without ``follow``, one page of them.

    ``fetch(after)`` returns the next events; ``ended(pause)`` says whether the run has ended
    (waiting up to ``pause`` for it), which also closes a stream resumed after the run's last
    event (that stream would otherwise wait forever for a terminal event it has already had).
    """
    yield b"retry: 1000\n\n"
    try:
        async for frame in _frames(fetch, ended, after, follow, poll, max_poll, keepalive,
                                   allowed, recheck):
            yield frame
    except StoreError:
        # The store is down: end the stream cleanly (a traceback mid-response would cut it
        # off); the client reconnects with Last-Event-ID and loses nothing.
        yield b": the store is unavailable; reconnect with Last-Event-ID\n\n"


async def _frames(fetch: Fetch, ended: Ended, after: int, follow: bool, poll: float,
                  max_poll: float, keepalive: float, allowed: Allowed | None,
                  recheck: float) -> AsyncIterator[bytes]:
    last, delay, quiet_since = after, poll, time.monotonic()
    checked = time.monotonic()
    while True:
        if allowed is not None and time.monotonic() - checked >= recheck:
            if not await allowed():
                return
            checked = time.monotonic()
        batch = await fetch(last)
        for event in batch:
            yield encode_event(event)
            last = event.id
            if event.type in TERMINAL_EVENTS:
                return
        if not follow:
            return
        if batch:
            delay, quiet_since = poll, time.monotonic()
            continue
        if await ended(delay):
            # The terminal event is written in the transaction that ends the run: one more
            # read gets anything written between the fetch above and the status check.
            for event in await fetch(last):
                yield encode_event(event)
            return
        if time.monotonic() - quiet_since >= keepalive:
            yield b": keep-alive\n\n"
            quiet_since = time.monotonic()
        delay = min(delay * 1.5, max_poll)
