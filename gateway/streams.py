"""A per-tenant cap on open event streams.

Each event stream holds a connection and polls the back end until its run ends, so a tenant that
opens thousands would take the gateway's sockets and threads from everyone. Streams are counted
per gateway process (each process holds its own connections), and a stream past the tenant's
``max_event_streams`` is refused with 429 before it starts.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import AsyncIterator

from .limits import LimitExceeded

#: Seconds a refused stream is told to wait: streams end when their runs do.
RETRY_AFTER = 5.0


class StreamSlot:
    """One open stream of a tenant; :meth:`release` gives its place back, once."""

    def __init__(self, slots: StreamSlots, tenant: str) -> None:
        self._slots, self.tenant, self._held = slots, tenant, True

    def release(self) -> None:
        with self._slots.lock:
            if self._held:
                self._held = False
                self._slots.open[self.tenant] -= 1

    async def hold(self, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``frames``, releasing the slot when the stream ends or its client goes."""
        try:
            async for frame in frames:
                yield frame
        finally:
            self.release()


class StreamSlots:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: Counter[str] = Counter()

    def take(self, tenant: str, limit: int) -> StreamSlot:
        """A slot for one more of ``tenant``'s streams; ``LimitExceeded`` past ``limit``."""
        with self.lock:
            if self.open[tenant] >= limit:
                raise LimitExceeded(
                    "stream_limit", f"{self.open[tenant]} event streams already open; your "
                    f"limit is {limit} at once: close one, or poll GET /v1/runs/{{id}}?wait=",
                    limit, self.open[tenant] + 1, retry_after=RETRY_AFTER)
            self.open[tenant] += 1
        return StreamSlot(self, tenant)
