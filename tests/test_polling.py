"""The SDK's sans-I/O waiting loops (``genloop.sdk.polling``, the HTTP stream's reconnect
policy), driven without I/O: a fake clock, events and errors handed in."""

from __future__ import annotations

import httpx
import pytest

from genloop.sdk import RunStatus
from genloop.sdk.errors import ClientError, RunTimeout, TransportError
from genloop.sdk.http import HttpConfig, StreamResume
from genloop.sdk.models import Event, RunInfo
from genloop.sdk.polling import MAX_POLL, Backoff, FollowByPolling, WaitForEnd

RUNNING = RunInfo(id="r", status=RunStatus.RUNNING, created_at=0.0)
DONE = RunInfo(id="r", status=RunStatus.SUCCEEDED, created_at=0.0)


class TickingClock:
    """A clock that moves ``step`` seconds every time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_wait_near_its_deadline_never_asks_for_a_negative_pause():
    # Given a clock that moves on every read, so a check and a subtraction straddle the deadline
    waiting = WaitForEnd("r", timeout=1.0, poll=0.5, clock=TickingClock(0.3))
    # When the run keeps running past the deadline
    pauses = []
    with pytest.raises(RunTimeout, match="still running after 1.0s"):
        while True:
            pauses.append(waiting.pause(RUNNING))
    # Then every pause was within the time left, never negative, and the wait timed out
    assert pauses and all(0 < p <= 0.5 for p in pauses)


def test_wait_ends_when_the_run_ends_and_backs_off_while_it_runs():
    waiting = WaitForEnd("r", timeout=None, poll=0.1)
    pauses = [waiting.pause(RUNNING) for _ in range(12)]
    assert pauses[:3] == pytest.approx([0.1, 0.15, 0.225])
    assert max(pauses) == MAX_POLL
    assert waiting.pause(DONE) is None


def test_wait_with_a_spent_timeout_raises_at_the_first_running_status():
    waiting = WaitForEnd("r", timeout=0.0, poll=0.1)
    assert waiting.pause(DONE) is None
    with pytest.raises(RunTimeout):
        waiting.pause(RUNNING)


def _event(i: int, kind: str = "node.succeeded") -> Event:
    return Event(id=i, run_id="r", type=kind, time=0.0)


def test_follow_by_polling_stops_at_the_last_event_and_resets_its_pause():
    follow = FollowByPolling(after=3, poll=0.2)
    assert follow.take([]) == [] and follow.pause() == 0.2
    assert follow.take([]) == [] and follow.pause() == pytest.approx(0.3)
    batch = [_event(4), _event(5, "run.succeeded"), _event(6)]
    assert [e.id for e in follow.take(batch)] == [4, 5]
    assert follow.done and follow.last == 5 and follow.pause() == 0.0


def test_backoff_resets_when_something_arrives():
    backoff = Backoff(0.2)
    assert [backoff.next(), backoff.next()] == pytest.approx([0.2, 0.3])
    assert backoff.next(progressed=True) == 0.0
    assert backoff.next() == 0.2


def test_a_dropped_stream_resumes_after_the_last_event_until_attempts_drops_in_a_row():
    # Given a stream policy allowing 3 tries
    resume = StreamResume("r", after=0, config=HttpConfig("http://gateway", attempts=3))
    # When the stream drops, an event comes, then it drops three times in a row
    assert resume.dropped(httpx.ConnectError("refused")) == pytest.approx(0.2)
    assert not resume.seen(_event(7)) and resume.last == 7
    assert resume.dropped(None) == pytest.approx(0.2)
    assert resume.dropped(ClientError("busy", status_code=503)) == pytest.approx(0.4)
    # Then the third drop in a row ends the follow with a genloop error
    with pytest.raises(TransportError, match="ended early"):
        resume.dropped(None)
    assert resume.seen(_event(8, "run.failed"))


def test_a_stream_refused_for_good_is_not_retried():
    resume = StreamResume("r", after=0, config=HttpConfig("http://gateway"))
    with pytest.raises(ClientError, match="no such run"):
        resume.dropped(ClientError("no such run", status_code=404))
