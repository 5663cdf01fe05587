"""``Client``: submit graphs and loops, follow and collect them, wherever they run."""

from __future__ import annotations

import importlib
from os import PathLike
from typing import Any

from .backend import Backend
from .models import RunSpec
from .run import Run


class Client:
    """Entry point of the SDK. Pick a back end with one of the constructors::

        with Client.local(home=".genloop") as client:   # embedded, no server
            run = client.submit(graph)
            result = run.wait(timeout=300)
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @classmethod
    def local(
        cls, home: str | PathLike[str] = ".genloop", *, threads: int = 4, **options: Any
    ) -> Client:
        """Run everything in this process: Dramatiq's StubBroker with in-process worker threads,
        a SQLite state store and artifacts under ``home``. Needs the ``workers`` extra."""
        try:
            # Imported by name: the SDK has no static dependency on the workers package.
            embedded = importlib.import_module("genloop.workers.embedded")
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "Client.local() runs workers in this process and needs the workers extra: "
                "pip install 'genloop[workers]'"
            ) from exc
        return cls(embedded.EmbeddedBackend(home, threads=threads, **options))

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

    def read_artifact(self, key: str) -> bytes:
        """The bytes of an artifact (a candidate's ``artifact``), e.g. PNG data."""
        return self._backend.read_artifact(key)

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
