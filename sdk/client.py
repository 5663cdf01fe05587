"""``Client``: submit graphs and loops, follow and collect them, wherever they run.

:class:`_ClientBase` holds what ``Client`` and ``AsyncClient`` share: the constructors that pick
and configure a back end (``local``, ``connect``, ``http``). Each subclass only says how to sit
on a sync back end and on an HTTP configuration.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any, Self

from .backend import Backend
from .models import RunInfo, RunQuery, RunSpec, RunStatus
from .run import Run
from .schema import SpecSchema
from .uploads import image_upload
from .webhooks import WebhookNotice

if TYPE_CHECKING:  # httpx is imported by the HTTP back end alone, when one is made
    from .http import HttpConfig


def _workers_module(name: str, what: str) -> Any:
    try:
        # Imported by name: the SDK has no static dependency on the workers package.
        return importlib.import_module(f"genloop.workers.{name}")
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"{what} needs the workers extra: pip install 'genloop[workers]'"
        ) from exc


class _ClientBase:
    """Constructors shared by the sync and async clients."""

    @classmethod
    def _on_backend(cls, backend: Backend) -> Self:
        raise NotImplementedError

    @classmethod
    def _on_http(cls, config: HttpConfig) -> Self:
        raise NotImplementedError

    @classmethod
    def local(
        cls, home: str | PathLike[str] = ".genloop", *, threads: int = 4, **options: Any
    ) -> Self:
        """Run everything in this process: Dramatiq's StubBroker with in-process worker threads,
        a SQLite state store and artifacts under ``home``. Needs the ``workers`` extra.

        ``options`` go to :class:`~genloop.workers.backends.embedded.EmbeddedRuntime`, among them
        the registries this runtime uses instead of the process-wide defaults: ``registry`` (ops),
        ``evaluators`` (an ``EvaluatorRegistry``), ``refiners`` (a ``RefinerRegistry``)."""
        embedded = _workers_module("backends.embedded",
                                   "Client.local() runs workers in this process and")
        return cls._on_backend(embedded.EmbeddedBackend(home, threads=threads, **options))

    @classmethod
    def connect(cls, redis_url: str, *, artifacts: Any = None, **options: Any) -> Self:
        """Submit to a Redis worker pool (``genloop worker`` processes on any host)."""
        module = _workers_module("backends.redis_backend",
                                 "Client.connect() talks to Redis directly and")
        return cls._on_backend(module.RedisBackend(redis_url, artifacts=artifacts, **options))

    @classmethod
    def http(
        cls, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
        attempts: int = 5, max_backoff: float = 10.0, transport: Any = None,
    ) -> Self:
        """Talk to a genloop gateway (``genloop serve``) with an API key.

        Transient failures are retried up to ``attempts`` tries with backoff capped at
        ``max_backoff`` seconds; ``transport`` replaces httpx's (for tests and proxies).
        """
        from .http import HttpConfig

        return cls._on_http(HttpConfig(
            base_url, api_key=api_key, timeout=timeout, attempts=attempts,
            max_backoff=max_backoff, transport=transport,
        ))


class Client(_ClientBase):
    """Entry point of the SDK. Pick a back end with one of the constructors::

        with Client.local(home=".genloop") as client:   # embedded, no server
            run = client.submit(graph)
            result = run.wait(timeout=300)

    ``Client.connect(redis_url)`` and ``Client.http(url, api_key=...)`` give the same API over a
    worker pool or a gateway; :class:`~genloop.sdk.aio.AsyncClient` is the asyncio twin.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @classmethod
    def _on_backend(cls, backend: Backend) -> Self:
        return cls(backend)

    @classmethod
    def _on_http(cls, config: HttpConfig) -> Self:
        from .http import HttpBackend

        return cls(HttpBackend(config))

    @property
    def backend(self) -> Backend:
        return self._backend

    def submit(self, spec: RunSpec, idempotency_key: str | None = None) -> Run:
        """Validate and start a run of a ``Graph`` or ``Loop``.

        Raises ``GraphError`` (listing every problem) and creates nothing if the spec is invalid.
        Submitting again with the same ``idempotency_key`` returns the same run.
        """
        return Run(self._backend, self._backend.submit(spec, idempotency_key))

    def get(self, run_id: str) -> Run:
        """A handle on an existing run (``NotFound`` if there is none)."""
        return Run(self._backend, self._backend.get(run_id))

    def resume(self, run_id: str) -> Run:
        """Finish a run interrupted by a crash, reusing every stored result."""
        return Run(self._backend, self._backend.resume(run_id))

    def runs(self, *, status: Sequence[RunStatus | str] | RunStatus | str | None = None,
             labels: Mapping[str, str] | None = None, since: float | None = None,
             until: float | None = None, page_size: int = 50) -> Iterator[RunInfo]:
        """Your runs, newest first, fetched a page at a time as you iterate; only those in
        ``status``, with every one of ``labels``, created in ``[since, until)`` (unix time).
        Through a gateway: the tenant's runs only. A listed run's ``nodes`` are left out
        (``get(run.id)`` has them)."""
        query = run_query(status, labels, since, until, page_size)
        while True:
            page = self._backend.runs(query)
            yield from page.runs
            if page.next is None:
                return
            query = query.model_copy(update={"cursor": page.next})

    def notify(self, url: str, type: str, key: str, **data: object) -> str:
        """POST ``{"type": type, **data}`` to ``url``, signed and retried as a run's webhook is,
        once per ``key`` (again with the same key: the first delivery's id, nothing sent);
        returns its ``webhook-id``. For what is not one run, e.g. a campaign's end. Only
        through a gateway (``GraphError`` elsewhere, sending nothing)."""
        notice = WebhookNotice(url=url, type=type, key=key, data=data)
        return self._backend.notify(notice)

    def read_artifact(self, key: str) -> bytes:
        """The bytes of an artifact (a candidate's ``artifact``), e.g. PNG data."""
        return self._backend.read_artifact(key)

    def upload(self, image: bytes | str | PathLike[str]) -> str:
        """Store a PNG or JPEG (bytes or a file path) and return its artifact key, to edit it
        (a generate node's ``init_image`` or ``mask``) and read it back. Through a gateway the
        image is yours alone, like your runs' images, and stored re-encoded (no metadata)."""
        return self._backend.write_artifact(*image_upload(image))

    def schema(self) -> SpecSchema:
        """JSON Schema of Graph and Loop with ``model``, ``evaluator``, ``refiner`` and ``op``
        narrowed to the names this back end serves, and its defaults: give ``.loop`` or
        ``.graph`` to an agent to constrain the specs it writes."""
        return self._backend.schema()

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def run_query(status: Sequence[RunStatus | str] | RunStatus | str | None,
              labels: Mapping[str, str] | None, since: float | None, until: float | None,
              page_size: int) -> RunQuery:
    if isinstance(status, str):  # one state (RunStatus is a str too), not its letters
        status = [status]
    return RunQuery(cursor=None, status=None if status is None else [RunStatus(s) for s in status],
                    labels=dict(labels or {}), since=since, until=until, limit=page_size)
