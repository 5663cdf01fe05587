"""The SDK's waiting loops without their I/O: what to ask next and how long to pause.

``Run`` and ``AsyncRun`` (and the sync and async back ends) drive the same objects here, the
way httpx's sync and async clients share a sans-I/O core: each driver only does the call and
the sleep (``time.sleep`` or ``asyncio.sleep``), so the two flavours cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .errors import RunTimeout
from .models import Event, RunInfo

#: Event types after which a run has nothing more to say.
TERMINAL_EVENTS = frozenset({"run.succeeded", "run.failed", "run.cancelled"})
#: Longest pause between two polls, seconds.
MAX_POLL = 1.0


class Backoff:
    """Pauses between polls: ``first`` seconds, growing by half each empty poll up to
    :data:`MAX_POLL`, and back to ``first`` once something arrives."""

    def __init__(self, first: float) -> None:
        self.first = first
        self.delay = first

    def next(self, progressed: bool = False) -> float:
        """The pause before the next poll (``progressed``: the last poll brought something)."""
        if progressed:
            self.delay = self.first
            return 0.0
        pause = self.delay
        self.delay = min(self.delay * 1.5, MAX_POLL)
        return pause


class WaitForEnd:
    """``Run.wait``: poll the status until the run ends, or raise ``RunTimeout``.

    The clock is read once per step, so a pause never runs past the deadline and is never
    negative (two reads could straddle the deadline: a check just before it, then a negative
    ``deadline - now`` just after, which ``time.sleep`` refuses).
    """

    def __init__(self, run_id: str, timeout: float | None, poll: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run_id, self.timeout, self._clock = run_id, timeout, clock
        self._deadline = None if timeout is None else clock() + timeout
        self._backoff = Backoff(poll)

    def pause(self, info: RunInfo) -> float | None:
        """``None`` when ``info`` says the run ended; else how long to sleep before asking
        again. Raises ``RunTimeout`` once the deadline has passed."""
        if info.status.terminal:
            return None
        pause = self._backoff.next()
        if self._deadline is None:
            return pause
        left = self._deadline - self._clock()
        if left <= 0:
            raise RunTimeout(f"run {self.run_id} still {info.status} after {self.timeout}s")
        return min(pause, left)


class FollowByPolling:
    """``Backend.follow`` for back ends that cannot push: page through ``events`` after the
    last id seen, pausing (see :class:`Backoff`) while nothing new comes, until the run's last
    event."""

    def __init__(self, after: int, poll: float) -> None:
        self.last = after
        self.done = False
        self._backoff = Backoff(poll)

    def take(self, batch: Sequence[Event]) -> list[Event]:
        """The events of ``batch`` to hand on: all of them, or up to the run's last event
        (after which :attr:`done` is true)."""
        kept = []
        for event in batch:
            kept.append(event)
            self.last = event.id
            if event.type in TERMINAL_EVENTS:
                self.done = True
                break
        self._pause = self._backoff.next(progressed=bool(batch))
        return kept

    def pause(self) -> float:
        """How long to sleep before the next page (0 right after a non-empty one)."""
        return self._pause


#: Longest single long poll a client asks a gateway for, seconds (the gateway allows 30).
LONG_POLL = 25.0


class WaitByLongPoll:
    """``wait`` over a gateway's long poll (``GET /v1/runs/{id}?wait=s``): ask for up to
    :data:`LONG_POLL` s at a time until the run ends or the deadline passes. An answer that
    comes early without the end (a gateway that predates the long poll ignores ``wait``) is
    followed by a growing pause, as a poll would be."""

    def __init__(self, run_id: str, timeout: float | None, poll: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run_id, self.timeout, self._clock = run_id, timeout, clock
        self._deadline = None if timeout is None else clock() + timeout
        self._backoff = Backoff(poll)
        self._asked_at = 0.0

    def ask(self) -> float:
        """Seconds to ask the gateway to hold the next request for."""
        self._asked_at = self._clock()
        if self._deadline is None:
            return LONG_POLL
        return max(min(LONG_POLL, self._deadline - self._asked_at), 0.0)

    def pause(self, info: RunInfo, asked: float) -> float | None:
        """``None`` once ``info`` says the run ended, else the pause before asking again
        (``RunTimeout`` past the deadline)."""
        if info.status.terminal:
            return None
        now = self._clock()
        if self._deadline is not None and now >= self._deadline:
            raise RunTimeout(f"run {self.run_id} still {info.status} after {self.timeout}s")
        if now - self._asked_at >= asked * 0.9:
            return 0.0  # held as asked: ask again at once
        pause = self._backoff.next()
        return pause if self._deadline is None else min(pause, self._deadline - now)
