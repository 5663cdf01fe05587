"""Progress of a waiting tool call, read from the run's events.

Frameworks want one number that only grows (MCP's ``notifications/progress``: each value must
exceed the last) and a line of text. The number is the count of the run's nodes that have ended,
plus the fraction of denoising steps done by the nodes generating now; ``total`` is the run's
node count. A node's work may be split into instances (a round of four edits is four jobs, each
with its own step events); their steps are summed into one line for the node, so each event
gives at most one report and no report repeats another. An event that would not move the number
(a second instance starting, a run going from pending to running) gives none.
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

_ENDED = ("succeeded", "failed", "skipped", "cancelled")
#: Where a node that has started but reported no step yet stands (above its start, below 1).
_STARTED = 0.01


class ProgressMeter:
    """Turns a run's events into :class:`Progress` reports whose numbers strictly grow."""

    def __init__(self, total_nodes: int) -> None:
        self.total = total_nodes or None
        self.ended = 0
        self.last: float | None = None
        self.steps: dict[str, dict[str, tuple[int, int]]] = {}  # node -> instance -> step, total

    def read(self, event: Event) -> Progress | None:
        """The report for ``event``, or None if it would not move the number."""
        node = event.node_id
        if event.type == "run.submitted":
            value, message = 0.0, f"run {event.run_id} submitted"
        elif event.type.startswith("node.") and node and event.status in _ENDED:
            self.steps.pop(node, None)
            self.ended += 1
            value, message = float(self.ended), f"{node} {event.status}"
        elif event.type == "instance.started" and node:
            first = node not in self.steps
            self.steps.setdefault(node, {})[event.instance_id or node] = (0, 0)
            if not first:  # the node's start was reported; its steps now count over one more
                return None
            value, message = self._value(), f"{node} started"
        elif event.type == "progress" and node and event.step is not None and event.total:
            self.steps.setdefault(node, {})[event.instance_id or node] = (event.step, event.total)
            done = sum(s for s, _ in self.steps[node].values())
            of = sum(t for _, t in self.steps[node].values())
            value, message = self._value(), f"{node}: step {done}/{of}"
        elif event.type.startswith("run.") and event.status in _ENDED:
            value, message = float(self.total or self.ended), f"run {event.status}"
        else:
            return None
        if self.last is not None and value <= self.last:
            return None
        self.last = value
        return Progress(progress=value, total=self.total, message=message)

    def _value(self) -> float:
        running = sum(
            max(_STARTED, sum(s / t for s, t in steps.values() if t) / max(len(steps), 1))
            for steps in self.steps.values())
        return self.ended + min(running, 0.99)
