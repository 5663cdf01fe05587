"""Progress of a waiting tool call, read from the run's events.

Frameworks want one number that only grows (MCP's ``notifications/progress``) and a line of
text. The number is the count of the run's nodes that have ended, plus the fraction of denoising
steps of the node generating now; ``total`` is the run's node count.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel

from genloop.sdk import Event


class Progress(BaseModel):
    progress: float
    total: float | None = None
    message: str


#: What a tool call reports progress to, if its framework listens.
ProgressSink = Callable[[Progress], Awaitable[None]]


class ProgressMeter:
    """Turns a run's events into :class:`Progress` reports that never go backwards."""

    def __init__(self, total_nodes: int) -> None:
        self.total = total_nodes or None
        self.ended = 0
        self.last = 0.0

    def read(self, event: Event) -> Progress | None:
        """The report for ``event``, or None if it says nothing worth reporting."""
        if event.type.startswith("node.") and event.status in (
            "succeeded", "failed", "skipped", "cancelled"
        ):
            self.ended += 1
            value, message = float(self.ended), f"{event.node_id} {event.status}"
        elif event.type == "progress" and event.step is not None and event.total:
            value = self.ended + min(event.step / event.total, 0.99)
            message = f"{event.node_id}: step {event.step}/{event.total}"
        elif event.type.startswith("run.") and event.status:
            value, message = self.last, f"run {event.status}"
        else:
            return None
        self.last = max(self.last, value)
        return Progress(progress=self.last, total=self.total, message=message)
