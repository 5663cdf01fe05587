"""The body of every genloop Dramatiq actor: claim -> op body -> complete.

A message names (run id, instance id); the instance's params and inputs are in the store.
1. An instance that already ended (a duplicate delivery, or a cancelled run) is acked and dropped.
2. If a result is stored under the instance's result key, it completes at once (no op body).
3. Otherwise the worker takes a lease on the key. If another worker holds it (the same message
   delivered twice, or the same work in another run), the message is re-enqueued to look again
   shortly (at most :data:`LEASE_POLL_CAP`): it never runs the body while the holder is alive,
   finds the holder's result soon after it is stored, and takes over if the holder dies.
4. The op body runs while the process's lease keeper renews the lease; the scheduler stores its
   result and completes the instance in one transaction.
Failures propagate to Dramatiq: its Retries middleware decides on a retry, and
:class:`~genloop.workers.middleware.attempts.AttemptOutcomes` records the outcome.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pydantic import BaseModel, ValidationError

from genloop.sdk.errors import Permanent

from .artifacts.base import ArtifactStore
from .context import OpContext
from .keys import result_key
from .ops.registry import OpRegistry, OpSpec
from .scheduler import Scheduler
from .stores.base import StateStore
from .stores.records import InstanceRecord, ItemRef, ResultRecord

log = logging.getLogger(__name__)

#: Longest wait before a delivery that found its key leased looks again (seconds).
LEASE_POLL_CAP = 0.5


class LeaseKeeper:
    """Renews the leases this process holds, every third of their ttl, from one thread.

    One shared thread rather than one per execution: starting a thread per message cost more
    than everything else a no-op node does.
    """

    def __init__(self, store: StateStore, ttl: float) -> None:
        self.store, self.ttl = store, ttl
        self._held: dict[str, str] = {}  # owner token -> key
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def hold(self, key: str, owner: str, *,
             released_on_success: bool = False) -> Iterator[None]:
        """Keep ``owner``'s claim on ``key`` alive while the block runs, then release it (only
        when the block fails, with ``released_on_success``: the completion that follows
        releases it)."""
        with self._lock:
            self._held[owner] = key
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew_forever, daemon=True, name="genloop-leases"
                )
                self._thread.start()
        ok = False
        try:
            yield
            ok = True
        finally:
            with self._lock:
                self._held.pop(owner, None)
            if not (ok and released_on_success):
                self.store.release(key, owner)

    def _renew_forever(self) -> None:
        while True:
            time.sleep(self.ttl / 3)
            with self._lock:
                held = list(self._held.items())
            for owner, key in held:
                try:
                    if not self.store.renew(key, owner, self.ttl) and owner in self._held:
                        # Expired before renewal (a stalled process): a twin may run now.
                        log.warning("lost the lease on %s", key)
                except Exception:  # a store hiccup must not kill renewal of the others
                    log.exception("renewing the lease on %s failed", key)


class Executor:
    """Runs instances. One per worker process; called from many worker threads."""

    def __init__(
        self,
        scheduler: Scheduler,
        artifacts: ArtifactStore,
        registry: OpRegistry,
        *,
        resources: object = None,
        lease_ttl: float = 30.0,
        attempt_of: Callable[[], int] = lambda: 1,
    ) -> None:
        self.scheduler = scheduler
        self.store = scheduler.store
        self.artifacts = artifacts
        self.registry = registry
        self.resources = resources
        self.lease_ttl = lease_ttl
        self.leases = LeaseKeeper(self.store, lease_ttl)
        self.owner = f"worker-{uuid.uuid4().hex[:12]}"
        self._attempt_of = attempt_of

    def __call__(self, run_id: str, instance_id: str) -> None:
        inst = self.store.instance(run_id, instance_id)
        if inst.status.terminal:
            return
        node = self.scheduler.topology(run_id).nodes[inst.node_id]
        spec = self.registry.get(node.op)
        if spec is None:
            raise Permanent(f"op {node.op!r} is not registered in this worker "
                            "(start it with --import for the module that defines it)")
        try:
            params = spec.params.model_validate(inst.params)
        except ValidationError as exc:
            raise Permanent(f"invalid params for op {node.op!r}: {exc}") from exc
        identity = spec.identity(params, self.resources) if spec.identity else ""
        # Keyed on the params as this worker's model reads them (defaults filled in), so a
        # client that could not validate them (a remote op) still shares stored results.
        key = result_key(spec.name, spec.version, params.model_dump(mode="json"), inst.inputs,
                         identity, self.scheduler.topology(run_id).graph.namespace)

        # One lease token per execution: two threads of this process are two claimants.
        owner = f"{self.owner}/{uuid.uuid4().hex[:8]}"
        outcome, lease = self.scheduler.claim_and_start(inst, self._attempt_of(), key, owner,
                                                        self.lease_ttl)
        if outcome == "stored":
            stored = self.store.get_result(key)
            if stored is not None:  # results are never deleted; None only if the store lost it
                self.scheduler.succeeded(run_id, instance_id, stored, cached=True)
                return
            outcome, lease = "leased", 0.0
        if outcome == "leased":
            # Look again soon rather than after the whole lease: the holder usually finishes
            # long before its lease would run out, and then the stored result completes us.
            delay = min(max(lease, 0.05), LEASE_POLL_CAP)
            log.debug("%s/%s: key %s is leased elsewhere; looking again in %.2fs",
                      run_id, instance_id, key[:12], delay)
            self.scheduler.enqueue([inst], delay)
            return
        if outcome != "started":
            return
        with self.leases.hold(key, owner, released_on_success=True):
            result = self._run_body(spec, params, inst, key)
        # The completion stores the result and drops the lease in one step, so a twin waiting
        # on the lease finds the result the moment the lease is gone. (Should it fail, the
        # lease runs out unrenewed and the sweeper re-sends the instance.)
        self.scheduler.succeeded(run_id, instance_id, result, lease=(key, owner))

    def _run_body(self, spec: OpSpec, params: BaseModel, inst: InstanceRecord,
                  key: str) -> ResultRecord:
        ctx = OpContext(
            run_id=inst.run_id, node_id=inst.node_id, instance_id=inst.instance_id,
            attempt=inst.attempts, store=self.store, artifacts=self.artifacts,
            resources=self.resources,
        )
        output = spec.fn(params, self._load_inputs(inst.inputs), ctx)
        items = output if isinstance(output, list) else [output]
        for item in items:
            if not isinstance(item, BaseModel):
                raise Permanent(f"op {spec.name!r} returned {type(item).__name__}, "
                                "expected a pydantic model or a list of them")
        return ResultRecord(
            key=key, op=spec.name, items=[i.model_dump(mode="json") for i in items],
            halt=ctx.halted, created_at=time.time(),
        )

    def _load_inputs(self, refs: Sequence[ItemRef]) -> list:
        results: dict[str, ResultRecord] = {}
        items = []
        for ref in refs:
            result = results.get(ref.key)
            if result is None:
                result = self.store.get_result(ref.key)
                if result is None:
                    raise Permanent(f"input result {ref.key} is missing from the store")
                results[ref.key] = result
            model = self.registry[result.op].output if result.op in self.registry else None
            raw = result.items[ref.index]
            items.append(model.model_validate(raw) if model is not None else raw)
        return items
