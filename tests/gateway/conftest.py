"""The gateway suite: a real uvicorn server on a loopback port over each back end.

Every test gets fresh tenants (``stack.tenant()``), so tests share one server per back end yet
cannot see each other's runs. The Redis variant runs when ``genloop.workers.backends.redis_backend``
exists: a ``genloop worker`` pool on a database of its own executes the runs.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

sys.path.insert(0, str(Path(__file__).parent))

import gateway_ops  # noqa: E402,F401  (registers the ops these tests use)
from gateway_settings import (  # noqa: E402,F401
    MAX_BODY,
    METRICS_TOKEN,
    REDIS_DB,
    STORE_DB,
    redis_url,
)
from redis_util import PORT  # noqa: E402
from server import LiveServer  # noqa: E402

from genloop.gateway import (  # noqa: E402
    GatewaySettings,
    GatewayStore,
    SqliteGatewayStore,
    TenantLimits,
    create_app,
)
from genloop.sdk import Backend, Client  # noqa: E402
from genloop.sdk.aio import AsyncClient  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]


@dataclass
class Stack:
    """A live gateway over one back end."""

    kind: str
    url: str
    backend: Backend
    store: GatewayStore
    clients: list = field(default_factory=list)

    def tenant(self, limits: TenantLimits | None = None) -> tuple[str, str]:
        """A fresh tenant and its API key."""
        name = f"t-{uuid.uuid4().hex[:10]}"
        if limits is not None:
            self.store.set_limits(name, limits)
        return name, self.store.create_key(name)

    def client(self, key: str, **options) -> Client:
        options.setdefault("max_backoff", 0.2)
        client = Client.http(self.url, api_key=key, **options)
        self.clients.append(client)
        return client

    def aclient(self, key: str, **options) -> AsyncClient:
        options.setdefault("max_backoff", 0.2)
        return AsyncClient.http(self.url, api_key=key, **options)


#: How long a session waits for another's Redis stack: a mutmut child's few files take well under
#: a minute; within pytest-timeout's 300 s, so this message comes rather than its stack dump.
LOCK_WAIT = 240.0


@contextmanager
def _sole_session_on_the_gateway_databases() -> Iterator[None]:
    """Hold the Redis stack's databases for this test session alone: the stack empties them on
    start and its pool takes every message on them. ``make test``'s xdist workers have a Redis
    each; ``make mutation``'s two children share one, and each child's stack emptied the other's
    mid-test: false kills. An OS file lock, so a killed session's is released; one held past
    ``LOCK_WAIT`` s (a hung session) fails the wait, naming the file."""
    path = Path(tempfile.gettempdir()) / f"genloop-test-gateway-{PORT}-{REDIS_DB}.lock"
    lock = FileLock(path)
    try:
        lock.acquire(timeout=LOCK_WAIT)
    except Timeout:
        pytest.fail(f"another test session has held {path} for {LOCK_WAIT} s: a hung session "
                    "on this Redis port (fuser -v that file)")
    try:
        yield
    finally:
        lock.release()


def _redis_pool(tmp: Path) -> Iterator[Backend]:
    with _sole_session_on_the_gateway_databases():
        yield from _pool(tmp)


def _pool(tmp: Path) -> Iterator[Backend]:
    import redis

    from genloop.workers.backends.redis_backend import RedisBackend

    url = redis_url(REDIS_DB)
    redis.Redis.from_url(url).flushdb()
    artifacts = f"file://{tmp / 'artifacts'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(Path(__file__).parent)])}
    log = (tmp / "pool.log").open("w")  # the workers' own log, for a failing test's reader
    proc = subprocess.Popen(
        [sys.executable, "-m", "genloop.workers.cli.main", "worker", "--redis", url,
         "--artifacts", artifacts, "--queues", "gpu,cpu", "--processes", "1", "--threads", "4",
         "--import", "genloop_test_ops", "--import", "gateway_ops"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log,
    )
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 90
        while not client.hexists("genloop:ops", "gw-image"):
            assert proc.poll() is None, "the worker pool exited"
            assert time.monotonic() < deadline, "the worker pool did not start"
            time.sleep(0.1)
        backend = RedisBackend(url, artifacts=artifacts)
        yield backend
        backend.close()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()


@pytest.fixture(scope="session", params=["embedded", "redis"])
def stack(request, tmp_path_factory, resources) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"gateway-{request.param}")
    if request.param == "embedded":
        from genloop.workers.backends.embedded import EmbeddedBackend

        backends: Iterator[Backend] = iter(
            [EmbeddedBackend(tmp / "home", threads=4, resources=resources, lease_ttl=5.0,
                           fair_window=4)]  # as `genloop serve --local` runs it
        )
        store: GatewayStore = SqliteGatewayStore(tmp / "gateway.db")
    else:
        if importlib.util.find_spec("genloop.workers.backends.redis_backend") is None:
            pytest.skip("no Redis back end in this tree (genloop.workers.backends.redis_backend)")
        from genloop.gateway.redis_store import RedisGatewayStore

        backends = _redis_pool(tmp)
        store = RedisGatewayStore(redis_url(REDIS_DB), prefix="gwtest")
    backend = next(backends)
    try:
        # Webhooks may reach the tests' receivers on loopback, and retry at once
        settings = GatewaySettings(max_body_bytes=MAX_BODY,
                                   limits=TenantLimits(max_concurrent_runs=20),
                                   sse_max_poll=0.1, webhook_allow=["127.0.0.1/32"],
                                   webhook_backoff=0.05, metrics_token=METRICS_TOKEN)
        app = create_app(backend, store, settings)
        with LiveServer(app) as server:
            s = Stack(request.param, server.url, backend, store)
            yield s
            for client in s.clients:
                client.close()
        app.state.gateway.webhooks.stop()
    finally:  # the pool and its lock go even when the stack failed to start
        next(backends, None)
        if request.param == "embedded":
            backend.close()
        store.close()
