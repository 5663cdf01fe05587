"""The seam between the SDK's ``Client`` and where runs actually live.

``Client.local()`` talks to an embedded runtime in this process, ``Client.connect()`` to a Redis
worker pool, ``Client.http()`` to a gateway. Each is a :class:`Backend`; the ``Client`` and
``Run`` API on top is the same for all of them.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, nullcontext

from .errors import ClientError, GraphError, GraphProblem, NotFound
from .models import Event, RunInfo, RunPage, RunQuery, RunResult, RunSpec
from .ops import RefineAnswer
from .polling import TERMINAL_EVENTS as TERMINAL_EVENTS  # re-exported (the gateway's SSE)
from .polling import FollowByPolling, WaitForEnd
from .schema import SpecSchema
from .webhooks import WebhookNotice

#: A run id no back end ever issues; ``ping`` asks for it to touch the store.
_PROBE_ID = "0" * 32


class Backend(ABC):
    """What a client needs from wherever runs are executed."""

    #: Whether :meth:`notify` and a spec's ``webhook`` are delivered here (a gateway's).
    delivers_webhooks = False

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
    def pin(self, run_id: str, pinned: bool) -> RunInfo:
        """Keep the run and its results whatever the retention (``pinned``), or let them
        expire by it again."""

    @abstractmethod
    def read_artifact(self, key: str) -> bytes:
        """The bytes of an artifact (``NotFound`` if absent)."""

    def write_artifact(self, data: bytes, ext: str) -> str:
        """Store an image (``ext``: ``png`` or ``jpg``) to edit in a graph; its key."""
        raise NotImplementedError(f"{type(self).__name__} cannot store artifacts")

    def runs(self, query: RunQuery) -> RunPage:
        """One page of the runs ``query`` asks for, newest first (through a gateway: the
        tenant's own)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list runs")

    def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        """Answer the run's waiting ``agent`` refine (``RefineConflict`` if none waits)."""
        raise NotImplementedError(f"{type(self).__name__} cannot answer refine requests")

    def follow(self, run_id: str, after: int = 0, poll: float = 0.05) -> Iterator[Event]:
        """Events after ``after`` as they happen, ending with the run's last event.

        Pages through :meth:`events`, pausing between empty pages with a growing delay (``poll``
        up to 1 s) through :meth:`_pauses`; a back end that can push (the HTTP one, over
        server-sent events) overrides it.
        """
        following = FollowByPolling(after, poll)
        with self._pauses(run_id) as pause_for:
            while True:
                yield from following.take(self.events(run_id, after=following.last))
                if following.done:
                    return
                if pause := following.pause():
                    pause_for(pause)

    def wait(self, run_id: str, timeout: float | None = None, poll: float = 0.05) -> RunInfo:
        """Block until the run ends and return its last status (``RunTimeout`` after
        ``timeout`` s).

        Reads :meth:`get` with a growing pause between reads (``poll`` up to 1 s) through
        :meth:`_pauses`, which a back end told of a run's end cuts short; the HTTP one long-polls
        instead.
        """
        waiting = WaitForEnd(run_id, timeout, poll)
        with self._pauses(run_id) as pause_for:
            while (pause := waiting.pause(info := self.get(run_id))) is not None:
                pause_for(pause)
        return info

    def _pauses(self, run_id: str) -> AbstractContextManager[Callable[[float], object]]:
        """What :meth:`wait` and :meth:`follow` sleep with between reads of the run, taken
        before the first read: a plain sleep here. A back end told of a run's end returns one
        that returns early at it (the store's run-end watch), so nothing waits for a poll."""
        return nullcontext(time.sleep)

    def notify(self, notice: WebhookNotice) -> str:
        """Have ``notice`` delivered like a run's webhook; its ``webhook-id``. Only a gateway
        delivers webhooks: anywhere else this is refused, before anything is started."""
        raise GraphError([GraphProblem(
            node_id=None, path="webhook", message="webhooks are delivered by a gateway "
            f"(genloop serve); {type(self).__name__} has none")])

    def schema(self) -> SpecSchema:
        """Graph and Loop JSON Schema narrowed to the names this back end serves."""
        raise ClientError(f"{type(self).__name__} publishes no spec schema")

    def ping(self) -> None:
        """Raise if the store underneath cannot be reached (readiness checks)."""
        try:
            self.get(_PROBE_ID)
        except NotFound:
            pass

    def close(self) -> None:
        """Release connections and stop in-process workers."""


class AsyncBackend(ABC):
    """:class:`Backend` for asyncio: the same calls, awaited. ``AsyncClient`` sits on one."""

    @abstractmethod
    async def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo: ...

    @abstractmethod
    async def get(self, run_id: str) -> RunInfo: ...

    @abstractmethod
    async def result(self, run_id: str) -> RunResult: ...

    @abstractmethod
    async def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]: ...

    @abstractmethod
    async def cancel(self, run_id: str) -> RunInfo: ...

    @abstractmethod
    async def resume(self, run_id: str) -> RunInfo: ...

    @abstractmethod
    async def pin(self, run_id: str, pinned: bool) -> RunInfo: ...

    @abstractmethod
    async def read_artifact(self, key: str) -> bytes: ...

    async def write_artifact(self, data: bytes, ext: str) -> str:
        """Store an image (``ext``: ``png`` or ``jpg``) to edit in a graph; its key."""
        raise NotImplementedError(f"{type(self).__name__} cannot store artifacts")

    async def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        """Answer the run's waiting ``agent`` refine (``RefineConflict`` if none waits)."""
        raise NotImplementedError(f"{type(self).__name__} cannot answer refine requests")

    async def runs(self, query: RunQuery) -> RunPage:
        """:meth:`Backend.runs`, awaited."""
        raise NotImplementedError(f"{type(self).__name__} cannot list runs")

    async def notify(self, notice: WebhookNotice) -> str:
        """:meth:`Backend.notify`, awaited (refused but by a gateway's)."""
        raise GraphError([GraphProblem(
            node_id=None, path="webhook", message="webhooks are delivered by a gateway "
            f"(genloop serve); {type(self).__name__} has none")])

    async def follow(self, run_id: str, after: int = 0, poll: float = 0.05) -> AsyncIterator[Event]:
        """Events as they happen, ending with the run's last event (polls by default)."""
        import asyncio  # loaded already: this runs in an event loop (the SDK imports it lazily)

        following = FollowByPolling(after, poll)
        while True:
            for event in following.take(await self.events(run_id, after=following.last)):
                yield event
            if following.done:
                return
            if pause := following.pause():
                await asyncio.sleep(pause)

    async def wait(self, run_id: str, timeout: float | None = None,
                   poll: float = 0.05) -> RunInfo:
        """:meth:`Backend.wait`, awaited (polls by default)."""
        import asyncio  # as in follow

        waiting = WaitForEnd(run_id, timeout, poll)
        while (pause := waiting.pause(info := await self.get(run_id))) is not None:
            await asyncio.sleep(pause)
        return info

    async def schema(self) -> SpecSchema:
        """Graph and Loop JSON Schema narrowed to the names this back end serves."""
        raise ClientError(f"{type(self).__name__} publishes no spec schema")

    async def aclose(self) -> None:
        """Release connections and stop in-process workers."""
