"""``Client.connect(redis_url)``'s back end: submit to, and follow, a Redis worker pool.

The submitting process runs no op: it validates, plans and enqueues (Dramatiq's RedisBroker),
then reads the shared Redis store. It imports neither torch nor any model code.
"""

from __future__ import annotations

import redis
from dramatiq.brokers.redis import RedisBroker

from genloop.sdk.backend import Backend
from genloop.sdk.errors import ClientError, GenloopError
from genloop.sdk.models import Event, RunInfo, RunResult, RunSpec

from .artifacts import open_artifact_store
from .broker import DEFAULT_QUEUES, wire
from .catalogue import published_queues, with_published
from .ops.registry import OpRegistry, default_registry
from .results import run_info, run_result
from .stores.base import IdempotencyConflict
from .stores.redis import RedisStateStore


def artifacts_key(prefix: str) -> str:
    return f"{prefix}:config:artifacts"


class RedisBackend(Backend):
    """Talks to the pool through Redis alone. ``artifacts`` defaults to what the workers use."""

    def __init__(self, url: str, artifacts: str | None = None, *, prefix: str = "genloop",
                 registry: OpRegistry | None = None) -> None:
        from . import ops as _builtin_ops  # noqa: F401  (registers the built-in ops)

        self.client = redis.Redis.from_url(url)
        try:
            uri = artifacts or (self.client.get(artifacts_key(prefix)) or b"").decode() or None
        except redis.RedisError as exc:
            raise ClientError(f"cannot reach Redis at {url}: {exc}") from exc
        if uri is None:
            raise GenloopError(
                "no artifact store: pass artifacts='file:///dir' or 's3://bucket/prefix', "
                "or start a worker (genloop worker --artifacts ...) so it publishes its own"
            )
        self.store = RedisStateStore(client=self.client, prefix=prefix)
        self.artifacts = open_artifact_store(uri)
        registry = with_published(self.client, registry or default_registry, prefix)
        queues = sorted(set(DEFAULT_QUEUES) | {s.queue for s in registry.values()}
                        | published_queues(self.client, prefix))
        self.broker = RedisBroker(client=self.client)
        self.wiring = wire(self.broker, self.store, self.artifacts, registry, queues=queues)
        self.scheduler = self.wiring.scheduler

    def submit(self, spec: RunSpec, idempotency_key: str | None) -> RunInfo:
        try:
            run = self.scheduler.submit(spec, idempotency_key)
        except IdempotencyConflict as exc:
            raise ClientError(str(exc), status_code=409, code="idempotency_conflict") from exc
        return run_info(self.store, run.id)

    def get(self, run_id: str) -> RunInfo:
        return run_info(self.store, run_id)

    def result(self, run_id: str) -> RunResult:
        return run_result(self.store, run_id)

    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        self.store.get_run(run_id)
        return self.store.events(run_id, after, limit)

    def cancel(self, run_id: str) -> RunInfo:
        self.scheduler.cancel(run_id)
        return run_info(self.store, run_id)

    def resume(self, run_id: str) -> RunInfo:
        self.scheduler.resume(run_id)
        return run_info(self.store, run_id)

    def read_artifact(self, key: str) -> bytes:
        return self.artifacts.get(key)

    def close(self) -> None:
        self.broker.close()
        self.client.close()
