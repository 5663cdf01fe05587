"""The seam between the SDK's ``Client`` and where runs actually live.

``Client.local()`` talks to an embedded runtime in this process, ``Client.connect()`` to a Redis
worker pool, ``Client.http()`` to a gateway. Each is a :class:`Backend`; the ``Client`` and
``Run`` API on top is the same for all of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from .models import Event, RunInfo, RunResult, RunSpec


class Backend(ABC):
    """What a client needs from wherever runs are executed."""

    @abstractmethod
    def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo:
        """Validate and accept a run. The same idempotency key returns the same run."""

    @abstractmethod
    def get(self, run_id: str) -> RunInfo:
        """The run's status (``NotFound`` if absent)."""

    @abstractmethod
    def result(self, run_id: str) -> RunResult:
        """Outputs and failures collected so far (complete once the run has ended)."""

    @abstractmethod
    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        """Events with id greater than ``after``, oldest first."""

    @abstractmethod
    def cancel(self, run_id: str) -> RunInfo:
        """Ask the run to stop; pending work is cancelled, running work stops soon."""

    @abstractmethod
    def resume(self, run_id: str) -> RunInfo:
        """Re-drive an interrupted run, reusing every stored result."""

    @abstractmethod
    def read_artifact(self, key: str) -> bytes:
        """The bytes of an artifact (``NotFound`` if absent)."""

    def close(self) -> None:
        """Release connections and stop in-process workers."""
