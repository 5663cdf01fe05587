"""Waiting on a condition with a deadline, for the tests that depend on a TTL, a lease or a
grace running out: a test that waits for what it needs (a lease reported gone, an instance
reported stale) passes on a loaded machine and fails only when that never comes, where a
sleep sized against the TTL flakes on one and passes vacuously on the other."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout}s for {what}"
        time.sleep(0.01)
