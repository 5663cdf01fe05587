"""A :class:`~genloop.sdk.backend.Backend` over a scheduler, a state store and an artifact
store: what the embedded runtime and the Redis pool share. Only how they are built differs."""

from __future__ import annotations

from genloop.sdk.backend import Backend
from genloop.sdk.errors import ClientError
from genloop.sdk.models import Event, RunInfo, RunResult, RunSpec
from genloop.sdk.ops import RefineAnswer

from .artifacts.base import ArtifactStore
from .results import run_info, run_result
from .scheduler import Scheduler
from .stores.base import IdempotencyConflict


class StoreBackend(Backend):
    """Calls the scheduler and reads the stores directly, in this process."""

    def __init__(self, scheduler: Scheduler, artifacts: ArtifactStore) -> None:
        self.scheduler = scheduler
        self.store = scheduler.store
        self.artifacts = artifacts

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
        self.store.get_run(run_id)  # NotFound for an unknown run
        return self.store.events(run_id, after, limit)

    def cancel(self, run_id: str) -> RunInfo:
        self.scheduler.cancel(run_id)
        return run_info(self.store, run_id)

    def resume(self, run_id: str) -> RunInfo:
        self.scheduler.resume(run_id)
        return run_info(self.store, run_id)

    def read_artifact(self, key: str) -> bytes:
        return self.artifacts.get(key)

    def refine(self, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        from .agent_refine import answer as give

        return give(self.store, run_id, answer)
