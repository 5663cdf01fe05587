"""``OpContext``: what an op body gets besides its params and inputs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from genloop.sdk.errors import Cancelled

from ..artifacts.base import ArtifactStore
from ..stores.base import StateStore
from ..stores.records import EventRecord

if TYPE_CHECKING:
    from .agent_refine import AnswerWatch

#: How often an op may emit a progress event, and re-read the cancel flag, at most.
_PROGRESS_EVERY = 0.2
_CANCEL_CHECK_EVERY = 0.2


@dataclass
class OpContext:
    """Run and node ids, the attempt number, progress, cancellation, artifacts, resources.

    Progress and cancellation checks may be called from any thread (an engine's, for an op
    that returned a :class:`~genloop.workers.runtime.deferred.Deferred`).

    ``resources`` holds the worker's long-lived objects (model registry, evaluators), so an op
    loads a model once per process, not once per message.
    """

    run_id: str
    node_id: str
    instance_id: str
    attempt: int
    store: StateStore
    artifacts: ArtifactStore
    resources: Any = None
    #: Where a refine waiting for an agent's answer waits: the executor's watch.
    answers: AnswerWatch | None = None
    #: Instances of this node that run alongside this one (a loop round's images, a node's
    #: shards): a batched resource waits for them so they share one call. 1 on a retry.
    siblings: int = 1
    #: The run's lane (``Graph.priority``): a batched resource serves ``interactive`` first.
    priority: str = "interactive"
    #: The run's namespace (``Graph.namespace``, a gateway's tenant): what it may share.
    namespace: str | None = None
    halted: bool = False
    log: logging.LoggerAdapter = field(init=False)
    _last_progress: float = field(default=0.0, init=False)
    _last_cancel_check: float = field(default=0.0, init=False)
    _cancelled: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.log = logging.LoggerAdapter(
            logging.getLogger("genloop.op"),
            {"run_id": self.run_id, "node_id": self.node_id, "instance_id": self.instance_id},
        )

    @property
    def group(self) -> tuple[str, str]:
        """This node of this run: what :attr:`siblings` counts."""
        return (self.run_id, self.node_id)

    def progress(self, step: int, total: int, message: str | None = None) -> None:
        """Report step ``step`` of ``total``. Throttled, except for the last step."""
        now = time.monotonic()
        if step < total and now - self._last_progress < _PROGRESS_EVERY:
            return
        self._last_progress = now
        self.store.append_event(self.run_id, EventRecord(
            type="progress", time=time.time(), node_id=self.node_id,
            instance_id=self.instance_id, step=step, total=total, message=message,
        ))

    @property
    def cancelled(self) -> bool:
        """Whether the run was cancelled (re-read from the store at most every 0.2 s)."""
        now = time.monotonic()
        if not self._cancelled and now - self._last_cancel_check >= _CANCEL_CHECK_EVERY:
            self._last_cancel_check = now
            self._cancelled = self.store.get_run(self.run_id).cancel_requested
        return self._cancelled

    def check_cancelled(self) -> None:
        """Raise :class:`Cancelled` if the run was cancelled; call it between steps."""
        if self.cancelled:
            raise Cancelled(f"run {self.run_id} was cancelled")

    def halt(self) -> None:
        """Stop the run early after this op: every node downstream is skipped (the run still
        succeeds). The flag is stored with the result, so a cached result halts too."""
        self.halted = True
