"""``Run``: a handle on one submitted run."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .backend import Backend
from .models import Event, RunInfo, RunResult
from .ops import GenerationRequest, RefineAnswer


class Run:
    """A submitted run. Cheap to create; every call asks the back end afresh."""

    def __init__(self, backend: Backend, info: RunInfo, poll_interval: float = 0.05) -> None:
        self._backend = backend
        self._poll = poll_interval
        self.id = info.id
        self.info = info

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.info.status}>"

    def status(self) -> RunInfo:
        """The run's current status."""
        self.info = self._backend.get(self.id)
        return self.info

    def events(self, after: int = 0, *, follow: bool = True) -> Iterator[Event]:
        """Events after id ``after``; with ``follow`` keeps waiting until the run ends."""
        if follow:
            yield from self._backend.follow(self.id, after, self._poll)
            return
        last = after
        while batch := self._backend.events(self.id, after=last):
            yield from batch
            last = batch[-1].id

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run ends and return its result (``RunTimeout`` after ``timeout`` s).

        A failed or cancelled run is returned, not raised: look at ``result.status`` and
        ``result.failures``.
        """
        self.info = self._backend.wait(self.id, timeout, self._poll)
        return self._backend.result(self.id)

    def result(self) -> RunResult:
        """The outputs so far, without waiting."""
        return self._backend.result(self.id)

    def cancel(self) -> RunInfo:
        """Ask the run to stop. Returns at once; ``wait`` to see it end."""
        self.info = self._backend.cancel(self.id)
        return self.info

    def pin(self, pinned: bool = True) -> RunInfo:
        """Keep this run and the results it references whatever the back end's retention
        (``pinned=False``: let them expire by it again, counted from the run's end)."""
        self.info = self._backend.pin(self.id, pinned)
        return self.info

    def read_artifact(self, key: str) -> bytes:
        return self._backend.read_artifact(key)

    def refine(self, requests: Sequence[GenerationRequest] | RefineAnswer,
               node_id: str | None = None) -> RefineAnswer:
        """Answer this run's waiting ``agent`` refine with the next round's ``requests``.

        ``node_id`` names the refine node (from the ``refine.requested`` event); ``None`` means
        the one waiting now. A second answer raises ``RefineConflict`` (HTTP 409)."""
        return self._backend.refine(self.id, refine_answer(requests, node_id))


def refine_answer(requests: Sequence[GenerationRequest] | RefineAnswer,
                  node_id: str | None) -> RefineAnswer:
    """The :class:`RefineAnswer` for ``Run.refine``'s arguments (shared with ``AsyncRun``)."""
    if isinstance(requests, RefineAnswer):
        return requests
    return RefineAnswer(node_id=node_id, requests=list(requests))
