"""The gateway's logic, without HTTP: tenants, ownership, limits and idempotency over a Backend.

Any :class:`~genloop.sdk.backend.Backend` will do (embedded, Redis). Ownership lives in the
:class:`~.store.GatewayStore`; a run or artifact of another tenant is ``NotFound``, exactly like
one that does not exist, so ids leak nothing.

A tenant's artifacts are those its runs' ops wrote (the ``artifact`` field of an output item,
which ops set from ``ArtifactStore.put``) and those it uploaded, never any other string of a
result, since prompts and labels are whatever the tenant sent. Each spec gets the tenant as
its result ``namespace`` (unless the operator shares results), so a stored result, and the
artifacts it names, is reused only within the tenant that paid for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from genloop.sdk.backend import Backend
from genloop.sdk.errors import (
    ClientError,
    GenloopError,
    GraphError,
    GraphProblem,
    NotFound,
    RunTimeout,
)
from genloop.sdk.graph import Graph
from genloop.sdk.loop import Loop
from genloop.sdk.models import Event, RunInfo, RunPage, RunQuery, RunResult, RunSpec
from genloop.sdk.ops import RefineAnswer
from genloop.sdk.webhooks import WebhookNotice, new_secret
from genloop.workers.artifacts.base import ARTIFACT_KEY, artifact_key
from genloop.workers.backends.run_listing import RunFilter, list_page
from genloop.workers.backends.store_backend import StoreBackend
from genloop.workers.ops import OpRegistry, default_registry
from genloop.workers.runtime.agent_refine import value_problems
from genloop.workers.stores.base import DEFAULT_RETENTION

from .admission import Admission, default_admission
from .judges import backend_served
from .limits import (
    LimitExceeded,
    TenantLimits,
    check_concurrency,
    check_run,
    check_storage,
    check_upload,
)
from .store import GatewayStore, RunSummary, WebhookJob
from .streams import StreamSlot, StreamSlots
from .webhook_addresses import AddressPolicy, WebhookRefused
from .webhooks import BACKOFF, WebhookDeliverer

log = logging.getLogger(__name__)

#: Seconds between two looks for runs the back end's retention deleted.
FORGET_EVERY = 60.0


def scoped_key(tenant: str, key: str) -> str:
    """The back end's idempotency key for a tenant's key: two tenants never share a run (or
    learn of each other's runs through a 409) because they happened to pick the same key."""
    return "gw-" + hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()


def artifact_keys(value: Any) -> Iterator[str]:
    """The artifact keys ops wrote into a result's items: values of ``artifact`` fields."""
    if isinstance(value, dict):
        for name, item in value.items():
            if name == "artifact" and isinstance(item, str) and ARTIFACT_KEY.match(item):
                yield item
            else:
                yield from artifact_keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from artifact_keys(item)


class KeyConflict(GenloopError):
    """The tenant's idempotency key names an existing run with another spec (409)."""

    def __init__(self, message: str, run_id: str | None) -> None:
        super().__init__(message)
        self.run_id = run_id


class Gateway:
    """What each route calls, with the caller's tenant."""

    def __init__(self, backend: Backend, store: GatewayStore,
                 defaults: TenantLimits | None = None, admission: Admission | None = None,
                 share_results: bool = False, webhook_policy: AddressPolicy | None = None,
                 webhook_backoff: float = BACKOFF) -> None:
        self.backend = backend
        self.store = store
        self.defaults = defaults or TenantLimits()
        self._waits = ThreadPoolExecutor(max_workers=64, thread_name_prefix="genloop-wait")
        if admission is None:
            ops, queues = backend_ops(backend)
            admission = default_admission(ops, queues=queues, served=backend_served(backend))
        self.admission = admission
        self.share_results = share_results
        self.store.list_earlier_runs(self._created_at)
        # Count-then-submit must not interleave for one tenant, or two requests could both
        # pass the concurrency check. One lock per tenant, in this process; several gateway
        # processes on one Redis can overshoot by at most one run each.
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self.streams = StreamSlots()
        self.webhook_policy = webhook_policy or AddressPolicy()
        self.webhooks = WebhookDeliverer(store, backend, self.webhook_policy,
                                         backoff=webhook_backoff, limits=self.limits)
        #: How long the back end keeps an ended run: the gateway looks again after it.
        self.retention = (backend.store.retention if isinstance(backend, StoreBackend)
                          else DEFAULT_RETENTION)
        self._janitor: threading.Thread | None = None
        self._stopping = threading.Event()

    def start_janitor(self) -> None:
        """Forget, every :data:`FORGET_EVERY` s, the runs the back end's retention deleted (a
        thread; :meth:`stop_janitor` ends it)."""
        def loop() -> None:
            while not self._stopping.wait(FORGET_EVERY):
                try:
                    self.forget_expired()
                except Exception:  # a store outage: try again next time, never die
                    log.warning("forgetting expired runs failed", exc_info=True)

        if self._janitor is None:
            self._janitor = threading.Thread(target=loop, daemon=True, name="genloop-janitor")
            self._janitor.start()

    def stop_janitor(self) -> None:
        self._stopping.set()
        if self._janitor is not None:
            self._janitor.join()
            self._janitor = None
        self._stopping.clear()

    def stop(self) -> None:
        """Stop the background work: webhook deliveries and the janitor."""
        self.webhooks.stop()
        self.stop_janitor()

    def forget_expired(self, now: float | None = None, limit: int = 100) -> int:
        """Forget the runs due a look (each is, a retention after its submission) whose back
        end no longer has them (its retention deleted them), read by their tenant or not; look
        again a retention later at those it still keeps (unfinished, pinned, kept longer).
        Returns how many were forgotten."""
        now = time.time() if now is None else now
        forgotten, due = 0, self.store.due_forgets(now, limit)
        while due:
            for run_id in due:
                if (info := self._backend_run(run_id)) is None:
                    self.store.forget_run(run_id)
                    forgotten += 1
                else:  # unfinished, pinned or kept longer: not before a retention after its end
                    self.store.forget_at(run_id,
                                         max(now, info.finished_at or now) + self.retention)
            due = self.store.due_forgets(now, limit) if len(due) == limit else []
        return forgotten

    def limits(self, tenant: str) -> TenantLimits:
        return self.store.limits(tenant) or self.defaults

    def submit(self, tenant: str, spec: RunSpec, key: str | None) -> tuple[RunInfo, bool]:
        """Start a run for ``tenant``; ``(info, created)``, ``created`` false for a replay."""
        limits = self.limits(tenant)
        spec = self._with_recipe(spec, limits)
        self._own_images(tenant, spec)
        plan = self.admission.admit(spec, limits)
        if spec.webhook is not None:
            self._check_webhook(tenant, spec.webhook.url)
        # Whatever namespace and limits the client sent are replaced: it must not read
        # another's cache, nor let a fan-out grow past its own limits while the run runs.
        webhook = spec.webhook
        run_fields = {
            "namespace": None if self.share_results else f"tenant:{tenant}",
            "limits": plan.limits,
            "priority": spec.priority or limits.priority,
            # A run may shorten its tenant's retention (by default the back end's), not lengthen
            # it; a run that asks none keeps whatever the back end's is when it ends
            "retention": limits.retention if spec.retention is None else min(
                spec.retention, limits.retention or self.retention)}
        # The gateway delivers the webhook itself (its store holds the job), not the back end
        spec = plan.spec.model_copy(update={**run_fields, "webhook": None})
        # A Loop's compiled graph carries the same run fields (see Loop.compile)
        graph = spec if isinstance(spec, Graph) else plan.graph.model_copy(update=run_fields)
        backend_key = scoped_key(tenant, key) if key is not None else None
        with self._locks[tenant]:
            existing = self.store.run_for_key(backend_key) if backend_key is not None else None
            if existing is not None and self._backend_run(existing) is None:
                # its back end lost it (a wiped home): the key starts a new run, checked as any
                self.store.forget_run(existing)
                existing = None
            # A retried POST whose run exists is answered with that run (or 409 if the body
            # differs) even when the tenant is at its limit: that run is the one counted.
            if existing is None:
                check_storage(self.store.stored_runs(tenant), limits)
                check_run(plan.cost, limits)
                check_concurrency(*self._open(tenant), plan.cost, limits)
            try:
                info = self._submit(spec, graph, backend_key)
            except ClientError as exc:
                if exc.status_code == 409:
                    raise KeyConflict(str(exc), existing) from exc
                raise
            created = self.store.add_run(info.id, tenant, backend_key, plan.cost.cost,
                                         info.created_at)
            if created:  # no ended run is deleted by the back end within a retention from now
                self.store.forget_at(info.id, time.time() + self.retention)
            if created and webhook is not None:
                self.store.put_webhook(WebhookJob(
                    webhook_id=f"msg_{info.id}", run_id=info.id, tenant=tenant, url=webhook.url,
                    events=[e for e in webhook.events if e != "run.ended"],
                    next_at=time.time()))
                self.webhooks.start()
                self.webhooks.wake()
        if not created and self.store.owner(info.id) != tenant:  # pragma: no cover - defensive
            raise NotFound(f"no run {info.id!r}")
        log.info("run %s %s for tenant %s", info.id, "submitted" if created else "replayed",
                 tenant)
        return info, created

    def _submit(self, spec: RunSpec, graph: Graph, key: str | None) -> RunInfo:
        """An admitted spec to the back end: one here stores it as admitted, with the graph
        compiled once; any other is sent the spec, and checks it again."""
        if isinstance(self.backend, StoreBackend):
            return self.backend.submit_admitted(spec, graph, key)
        return self.backend.submit(spec, key)

    def _check_webhook(self, tenant: str, url: str) -> None:
        """A webhook must go to an address the gateway may call, and the tenant must have a
        secret to sign it with; 422 otherwise (nothing is started)."""
        why = None
        if self.store.webhook_secret(tenant) is None:
            why = ("make a webhook secret first (POST /v1/webhooks/secret): deliveries are "
                   "signed with it")
        else:
            try:
                self.webhook_policy.check(url)
            except WebhookRefused as exc:
                why = str(exc)
        if why is not None:
            raise GraphError([GraphProblem(node_id=None, path="webhook.url", message=why)])

    def notify(self, tenant: str, notice: WebhookNotice) -> WebhookJob:
        """A delivery of the tenant's own (a campaign's end), made once per ``notice.key``:
        the same key again answers with the first one's job and sends nothing."""
        self._check_webhook(tenant, notice.url)
        digest = hashlib.sha256(f"{tenant}\0{notice.key}".encode()).hexdigest()[:32]
        webhook_id = f"msg_n{digest}"  # 'n' is no hex digit: never a run's id
        with self._locks[tenant]:
            job = self.store.webhook(webhook_id)
            if job is None:
                job = WebhookJob(webhook_id=webhook_id, run_id="", tenant=tenant,
                                 url=notice.url, kind=notice.type,
                                 payload={**notice.data, "type": notice.type},
                                 next_at=time.time())
                self.store.put_webhook(job)
                self.webhooks.start()
                self.webhooks.wake()
        return job

    def new_webhook_secret(self, tenant: str) -> str:
        """A new secret for the tenant's deliveries, replacing any earlier one: shown once."""
        secret = new_secret()
        self.store.set_webhook_secret(tenant, secret)
        return secret

    def webhook(self, tenant: str, id: str) -> WebhookJob:
        """A delivery: by its ``webhook-id``, or a run id for the run's end (``NotFound`` for
        another tenant's run or one without)."""
        webhook_id = id if id.startswith("msg_") else f"msg_{id}"
        if webhook_id.startswith("msg_n"):  # a notice: no run, its tenant's alone
            notice = self.store.webhook(webhook_id)
            if notice is None or notice.run_id or notice.tenant != tenant:
                raise NotFound(f"no webhook {id!r}")
            return notice
        run_id = webhook_id.removeprefix("msg_").split("_")[0]  # run ids are hex
        self._own(tenant, run_id)
        job = self.store.webhook(webhook_id)
        if job is None or job.run_id != run_id:
            raise NotFound(f"no webhook {id!r}")
        return job

    def replay_webhook(self, tenant: str, id: str) -> WebhookJob:
        """Deliver a webhook again now, with the same ``webhook-id``."""
        return self.webhooks.replay(self.webhook(tenant, id))

    def _with_recipe(self, spec: RunSpec, limits: TenantLimits) -> RunSpec:
        """A Loop with its model's recipe filled in here (:meth:`Loop.with_recipe`), so
        admission checks and costs what will run. Where the tenant may not use the recipe's
        evaluator, the loop keeps the plain defaults, pinned so that admission, filling in the
        defaults, adds no recipe."""
        if not isinstance(spec, Loop):
            return spec
        served = self.admission.served()  # not the schema: a deep copy of it, per submit
        filled = spec.with_recipe(served.recipes.get(spec.model or served.default_model or ""))
        if filled is spec or limits.evaluators is None or filled.evaluator in limits.evaluators:
            return filled
        return spec.model_copy(update={"evaluator": spec.evaluator})

    def _backend_run(self, run_id: str) -> RunInfo | None:
        """The back end's run, or ``None`` where it no longer has it (its retention deleted it,
        or its home was wiped)."""
        try:
            return self.backend.get(run_id)
        except NotFound:
            return None

    def _open(self, tenant: str) -> tuple[int, float]:
        """The tenant's unfinished runs: how many, and their cost together."""
        count, cost = 0, 0.0
        for run_id in self.store.open_runs(tenant):
            info = self._backend_run(run_id)
            if info is None or info.status.terminal:
                self.store.mark_ended(run_id)
            else:
                count += 1
                cost += self.store.run_cost(run_id)
        return count, cost

    def _own(self, tenant: str, run_id: str) -> None:
        if self.store.owner(run_id) != tenant:
            raise NotFound(f"no run {run_id!r}")

    def get(self, tenant: str, run_id: str) -> RunInfo:
        self._own(tenant, run_id)
        return self.backend.get(run_id)

    def runs(self, tenant: str, query: RunQuery) -> RunPage:
        """A page of the tenant's runs (the gateway store's index of them, newest first), each
        read from the back end (``nodes`` left out: ``get`` has them)."""
        def rows(before: tuple[float, str] | None, n: int) -> list[tuple[float, str, str]]:
            at, last = before if before is not None else (None, "\uffff")
            return [(created, run_id, run_id) for run_id, created in
                    self.store.runs(tenant, before=at, limit=n, before_id=last)]

        def info(run_id: str) -> RunInfo | None:  # None: lost, nothing to list
            run = self._backend_run(run_id)
            return None if run is None else run.model_copy(update={"nodes": []})

        return list_page(rows, info, RunFilter.of(query), query.cursor, query.limit)

    def wait(self, tenant: str, run_id: str, timeout: float) -> RunInfo:
        """The run's status once it has ended, or after ``timeout`` s, whichever comes first:
        the back end's wait, told of the end rather than polling (a long poll)."""
        self._own(tenant, run_id)
        try:
            return self.backend.wait(run_id, timeout)
        except RunTimeout:
            return self.backend.get(run_id)

    async def wait_async(self, tenant: str, run_id: str, timeout: float) -> RunInfo:
        """:meth:`wait` for the event loop, in a pool of its own: a wait holds its thread for
        up to ``timeout`` s, and a few of them must not take the threads every other request
        shares (asyncio's and Starlette's pools)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._waits, self.wait, tenant, run_id, timeout)

    def summary(self, tenant: str, run_id: str, info: RunInfo) -> RunSummary:
        """The runs list's row of the run ``info`` describes: the summary kept when the ended
        run was indexed (while it still matches the run's status and finish time), else (a
        live run, or an ended one not indexed yet) read from its result."""
        kept = self.store.summary(run_id)
        if kept is not None and (kept.status, kept.finished_at) == (info.status,
                                                                    info.finished_at):
            self._own(tenant, run_id)
            return kept
        return RunSummary.of(self.result(tenant, run_id))

    def result(self, tenant: str, run_id: str) -> RunResult:
        self._own(tenant, run_id)
        result = self.backend.result(run_id)
        self._index(tenant, run_id, result)
        return result

    def events(self, tenant: str, run_id: str, after: int, limit: int) -> list[Event]:
        self._own(tenant, run_id)
        return self.backend.events(run_id, after=after, limit=limit)

    def cancel(self, tenant: str, run_id: str) -> RunInfo:
        self._own(tenant, run_id)
        return self.backend.cancel(run_id)

    def pin(self, tenant: str, run_id: str, pinned: bool) -> RunInfo:
        self._own(tenant, run_id)
        return self.backend.pin(run_id, pinned)

    def resume(self, tenant: str, run_id: str) -> RunInfo:
        """Re-drive the tenant's run after a crash. The store needs no change: a back end
        resumes only a run that has not ended (an ended one is answered as it is), and such a
        run is still open and unindexed here, so it stays counted once by the concurrency
        limits and its new artifacts are indexed when it ends."""
        self._own(tenant, run_id)
        return self.backend.resume(run_id)

    def refine(self, tenant: str, run_id: str, answer: RefineAnswer) -> RefineAnswer:
        """Answer the tenant's waiting refine: its strings within the prompt cap, a mask the
        tenant's own; the back end checks the rest (edits of the pause's own candidates only,
        the cost) before it takes the answer."""
        self._own(tenant, run_id)
        if problems := value_problems(answer, self.admission.max_prompt_chars):
            raise GraphError(problems)
        for r in answer.requests:
            if r.mask is not None:
                self._own_artifact(tenant, r.mask)  # NotFound for another tenant's image
        return self.backend.refine(run_id, answer)

    def artifact(self, tenant: str, key: str) -> bytes:
        """The bytes of ``key`` if it appears in a result of one of the tenant's runs."""
        self._own_artifact(tenant, key)
        return self.backend.read_artifact(key)

    def _own_artifact(self, tenant: str, key: str) -> None:
        """NotFound unless ``key`` appears in a result of one of the tenant's runs."""
        if not self.store.has_artifact(tenant, key):
            # Results a client has not fetched through the gateway are indexed on demand.
            for run_id in self.store.unindexed_runs(tenant):
                self._index(tenant, run_id, self.backend.result(run_id))
            if not self.store.has_artifact(tenant, key):
                raise NotFound(f"no artifact {key!r}")

    def _own_images(self, tenant: str, spec: RunSpec) -> None:
        """Images a spec edits (generate's ``init_image`` / ``mask``) must be the tenant's own
        (made by its runs or uploaded by it): an edit of another tenant's image would reveal
        it. Another's key and one that does not exist get the same 422."""
        problems = []
        for i, node in enumerate(getattr(spec, "nodes", ())):
            if node.op != "generate":
                continue
            for field in ("init_image", "mask"):
                if isinstance(key := node.params.get(field), str):
                    try:
                        self._own_artifact(tenant, key)
                    except NotFound:
                        problems.append(GraphProblem(
                            node_id=node.id, path=f"nodes[{i}].params.{field}", received=key,
                            message=f"params.{field}: no image {key!r} of yours; use one "
                            "your runs made or upload it (POST /v1/artifacts)"))
        if problems:
            raise GraphError(problems)

    def open_stream(self, tenant: str) -> StreamSlot:
        """A place for one more of the tenant's event streams (429 ``stream_limit`` past its
        ``max_event_streams``); release it when the stream ends."""
        return self.streams.take(tenant, self.limits(tenant).max_event_streams)

    def count_upload(self, tenant: str) -> None:
        """Count an upload against the tenant's rate before its body is decoded (a refused
        upload costs the gateway nothing); 429 ``upload_rate`` past the limit."""
        limit = self.limits(tenant).uploads_per_minute
        made, left = self.store.hit(tenant, "upload", 60.0)
        if made > limit:
            raise LimitExceeded("upload_rate", f"{made - 1} uploads this minute; your limit is "
                                f"{limit} a minute: retry in {left:.0f} s", limit, made,
                                retry_after=left)

    def upload(self, tenant: str, data: bytes, ext: str) -> str:
        """Store an image the tenant sent (re-encoded already) within its upload quotas, and
        record it as the tenant's; its key. An image the tenant holds already costs no quota."""
        if not self.store.has_artifact(tenant, artifact_key(data, ext)):
            check_upload(self.limits(tenant), self.store.upload_usage(tenant), len(data))
        key = self.backend.write_artifact(data, ext)
        self.store.add_upload(tenant, key, len(data))
        log.info("artifact %s uploaded by tenant %s (%d bytes)", key, tenant, len(data))
        return key

    def _index(self, tenant: str, run_id: str, result: RunResult) -> None:
        outputs = [out.items for out in result.outputs.values()]
        self.store.add_artifacts(tenant, set(artifact_keys(outputs)), run_id)
        if result.status.terminal:
            self.store.mark_indexed(run_id, RunSummary.of(result))

    def _created_at(self, run_id: str) -> float | None:
        run = self._backend_run(run_id)
        return None if run is None else run.created_at

    def ping(self) -> None:
        self.store.ping()
        self.backend.ping()


def backend_ops(backend: Backend) -> tuple[OpRegistry, Collection[str] | None]:
    """The back end's op registry (a Redis back end's includes the pool's published ops) and
    the queues its workers consume: a back end over a scheduler here says; of any other the
    default registry's ops are assumed, and its queues are not known (``None``)."""
    if isinstance(backend, StoreBackend):
        return backend.scheduler.registry, backend.scheduler.queues
    return default_registry, None
