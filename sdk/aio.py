"""asyncio flavour of the SDK: :class:`AsyncClient` and :class:`AsyncRun`.

The names and arguments are those of ``Client`` and ``Run``, awaited::

    async with AsyncClient.http("http://127.0.0.1:8000", api_key=key) as client:
        run = await client.submit(graph)
        async for event in run.events():
            ...
        result = await run.wait(timeout=300)

Over HTTP the calls are native asyncio (``httpx.AsyncClient``). ``AsyncClient.local`` and
``.connect`` run the sync back end in worker threads (:class:`ThreadedBackend`), which keeps
the event loop free while the store or Redis answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from os import PathLike
from typing import Self

from .backend import AsyncBackend, Backend
from .client import _ClientBase, run_query
from .http import AsyncHttpBackend, HttpConfig
from .models import Event, RunInfo, RunPage, RunQuery, RunResult, RunSpec, RunStatus
from .ops import GenerationRequest, RefineAnswer
from .run import refine_answer
from .schema import SpecSchema
from .uploads import image_upload
from .webhooks import WebhookNotice


class ThreadedBackend(AsyncBackend):
    """Any sync :class:`Backend` for asyncio: each call runs in a thread (``asyncio.to_thread``)."""

    def __init__(self, backend: Backend) -> None:
        self.sync = backend
        self._waits = ThreadPoolExecutor(max_workers=64, thread_name_prefix="genloop-wait")

    async def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo:
        return await asyncio.to_thread(self.sync.submit, spec, idempotency_key)

    async def get(self, run_id: str) -> RunInfo:
        return await asyncio.to_thread(self.sync.get, run_id)

    async def result(self, run_id: str) -> RunResult:
        return await asyncio.to_thread(self.sync.result, run_id)

    async def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        return await asyncio.to_thread(self.sync.events, run_id, after, limit)

    async def cancel(self, run_id: str) -> RunInfo:
        return await asyncio.to_thread(self.sync.cancel, run_id)

    async def resume(self, run_id: str) -> RunInfo:
        return await asyncio.to_thread(self.sync.resume, run_id)

    async def pin(self, run_id: str, pinned: bool) -> RunInfo:
        return await asyncio.to_thread(self.sync.pin, run_id, pinned)

    async def read_artifact(self, key: str) -> bytes:
        return await asyncio.to_thread(self.sync.read_artifact, key)

    async def write_artifact(self, data: bytes, ext: str) -> str:
        return await asyncio.to_thread(self.sync.write_artifact, data, ext)

    async def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        return await asyncio.to_thread(self.sync.refine, run_id, answer)

    async def runs(self, query: RunQuery) -> RunPage:
        return await asyncio.to_thread(self.sync.runs, query)

    async def notify(self, notice: WebhookNotice) -> str:
        return await asyncio.to_thread(self.sync.notify, notice)
    async def wait(self, run_id: str, timeout: float | None = None,
                   poll: float = 0.05) -> RunInfo:
        """The sync back end's wait (told of the end, not polling), in a thread of its own:
        a wait holds its thread until the run ends, and a few of them would take every thread
        of asyncio's default pool, which the other calls share."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._waits, self.sync.wait, run_id, timeout, poll)

    async def follow(self, run_id: str, after: int = 0,
                     poll: float = 0.05) -> AsyncIterator[Event]:
        """The sync back end's follow (woken by the run's end), each step in a wait thread."""
        loop = asyncio.get_running_loop()
        events = self.sync.follow(run_id, after, poll)
        try:
            while (event := await loop.run_in_executor(self._waits, next, events, None)):
                yield event
        finally:
            close = getattr(events, "close", None)  # a generator's: releases its watch
            try:
                if close is not None:
                    close()
            except ValueError:  # cancelled while a step runs: it ends with its pause, unread
                pass

    async def schema(self) -> SpecSchema:
        return await asyncio.to_thread(self.sync.schema)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.sync.close)
        self._waits.shutdown(wait=False)


class AsyncRun:
    """A submitted run, for asyncio; the same methods as ``Run``, awaited."""

    def __init__(self, backend: AsyncBackend, info: RunInfo, poll_interval: float = 0.05) -> None:
        self._backend = backend
        self._poll = poll_interval
        self.id = info.id
        self.info = info

    def __repr__(self) -> str:
        return f"<AsyncRun {self.id} {self.info.status}>"

    async def status(self) -> RunInfo:
        self.info = await self._backend.get(self.id)
        return self.info

    async def events(self, after: int = 0, *,
                     follow: bool = True) -> AsyncGenerator[Event, None]:
        """Events after id ``after``; with ``follow`` keeps waiting until the run ends."""
        if follow:
            async for event in self._backend.follow(self.id, after, self._poll):
                yield event
            return
        last = after
        while batch := await self._backend.events(self.id, after=last):
            for event in batch:
                yield event
            last = batch[-1].id

    async def wait(self, timeout: float | None = None) -> RunResult:
        """Wait until the run ends and return its result (``RunTimeout`` after ``timeout`` s)."""
        self.info = await self._backend.wait(self.id, timeout, self._poll)
        return await self._backend.result(self.id)

    async def result(self) -> RunResult:
        return await self._backend.result(self.id)

    async def cancel(self) -> RunInfo:
        self.info = await self._backend.cancel(self.id)
        return self.info

    async def pin(self, pinned: bool = True) -> RunInfo:
        self.info = await self._backend.pin(self.id, pinned)
        return self.info

    async def read_artifact(self, key: str) -> bytes:
        return await self._backend.read_artifact(key)

    async def refine(self, requests: Sequence[GenerationRequest] | RefineAnswer,
                     node_id: str | None = None) -> RefineAnswer:
        """:meth:`Run.refine <genloop.sdk.run.Run.refine>`, awaited."""
        return await self._backend.refine(self.id, refine_answer(requests, node_id))


class AsyncClient(_ClientBase):
    """``Client`` for asyncio: ``AsyncClient.local()``, ``.connect(url)``, ``.http(url, ...)``."""

    def __init__(self, backend: AsyncBackend) -> None:
        self._backend = backend

    @classmethod
    def _on_backend(cls, backend: Backend) -> Self:
        return cls(ThreadedBackend(backend))

    @classmethod
    def _on_http(cls, config: HttpConfig) -> Self:
        return cls(AsyncHttpBackend(config))

    @property
    def backend(self) -> AsyncBackend:
        return self._backend

    async def submit(self, spec: RunSpec, idempotency_key: str | None = None) -> AsyncRun:
        """Validate and start a run; see ``Client.submit``."""
        return AsyncRun(self._backend, await self._backend.submit(spec, idempotency_key))

    async def get(self, run_id: str) -> AsyncRun:
        return AsyncRun(self._backend, await self._backend.get(run_id))

    async def resume(self, run_id: str) -> AsyncRun:
        return AsyncRun(self._backend, await self._backend.resume(run_id))

    async def runs(self, *, status: Sequence[RunStatus | str] | RunStatus | str | None = None,
                   labels: Mapping[str, str] | None = None, since: float | None = None,
                   until: float | None = None, page_size: int = 50) -> AsyncIterator[RunInfo]:
        """:meth:`Client.runs`, for ``async for``."""
        query = run_query(status, labels, since, until, page_size)
        while True:
            page = await self._backend.runs(query)
            for run in page.runs:
                yield run
            if page.next is None:
                return
            query = query.model_copy(update={"cursor": page.next})

    async def notify(self, url: str, type: str, key: str, **data: object) -> str:
        """The async twin of :meth:`Client.notify`."""
        return await self._backend.notify(WebhookNotice(url=url, type=type, key=key, data=data))

    async def read_artifact(self, key: str) -> bytes:
        return await self._backend.read_artifact(key)

    async def upload(self, image: bytes | str | PathLike[str]) -> str:
        """The async twin of :meth:`Client.upload`."""
        return await self._backend.write_artifact(*image_upload(image))

    async def schema(self) -> SpecSchema:
        """The async twin of :meth:`Client.schema`."""
        return await self._backend.schema()

    async def aclose(self) -> None:
        await self._backend.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
