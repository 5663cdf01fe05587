"""Which of a run's agent refines wait for an answer, read from the run's events.

A loop with ``refiner="agent"`` pauses at each refine node: it appends ``refine.requested``
(a :class:`~genloop.sdk.ops.RefineRequest`) and waits for ``refine.answered``. If no answer
comes within its timeout the node falls back to another strategy and ends, with no event of
its own saying so; its ``node.*`` end event closes the request then.
"""

from __future__ import annotations

from genloop.sdk import Event, RefineRequest

REQUESTED, ANSWERED = "refine.requested", "refine.answered"
_ENDED = {"succeeded", "failed", "skipped", "cancelled"}


class RefineWatch:
    """Feed it a run's events in order; :attr:`waiting` is the request open now, if any."""

    def __init__(self) -> None:
        self._open: dict[str, RefineRequest] = {}

    def read(self, event: Event) -> None:
        node = event.node_id
        if node is None:
            return
        if event.type == REQUESTED and event.message:
            self._open[node] = RefineRequest.model_validate_json(event.message)
        elif event.type == ANSWERED or (event.type.startswith("node.")
                                         and event.status in _ENDED):
            self._open.pop(node, None)

    @property
    def waiting(self) -> RefineRequest | None:
        """The open request (a loop has one refine node waiting at a time)."""
        return next(iter(self._open.values()), None)
