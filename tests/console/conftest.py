"""A live gateway (uvicorn on a loopback port) with the console, over the embedded back end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))

from server import LiveServer  # noqa: E402

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app  # noqa: E402


@dataclass
class Console:
    url: str
    store: SqliteGatewayStore
    #: The embedded back end's home (its artifacts under ``artifacts/``).
    home: Path

    def key(self, tenant: str) -> str:
        return self.store.create_key(tenant)


@pytest.fixture(scope="module")
def console(tmp_path_factory, resources) -> Iterator[Console]:
    from genloop.workers.backends.embedded import EmbeddedBackend

    tmp = tmp_path_factory.mktemp("console")
    backend = EmbeddedBackend(tmp / "home", threads=2, resources=resources, lease_ttl=5.0)
    store = SqliteGatewayStore(tmp / "gateway.db")
    app = create_app(backend, store, GatewaySettings(sse_max_poll=0.1))
    with LiveServer(app) as server:
        yield Console(server.url, store, tmp / "home")
    backend.close()
    store.close()
