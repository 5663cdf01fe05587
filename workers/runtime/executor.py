"""The body of every genloop Dramatiq actor: claim -> op body -> complete.

A message names a run and one instance, or a chunk of several (:mod:`.chunks`), each run as
below; the instances' params and inputs are in the store.
1. An instance that already ended (a duplicate delivery, or a cancelled run) is acked and dropped.
2. If a result is stored under the instance's result key, it completes at once (no op body).
3. Otherwise the worker takes a lease on the key. If another worker holds it (the same message
   delivered twice, or the same work in another run), the message is re-enqueued to look again
   shortly (at most :data:`LEASE_POLL_CAP`): it never runs the body while the holder is alive,
   finds the holder's result soon after it is stored, and takes over if the holder dies.
4. The op body runs while the process's lease keeper renews the lease; the scheduler stores its
   result and completes the instance in one transaction.
5. An op body that returns a :class:`~genloop.workers.runtime.deferred.Deferred` (it handed its
   work to a batched resource) frees the worker thread at once; the instance is completed from the
   completion pool when the work is done, still under the lease (see :mod:`.deferred`).
   A draining worker (:meth:`Executor.drain`) hands back the deferred work its resources have
   not started: the lease released, the instance re-sent at the same attempt.
Failures of a synchronous body propagate to Dramatiq: its Retries middleware decides on a retry,
and :class:`~genloop.workers.middleware.attempts.AttemptOutcomes` records the outcome. Failures of
deferred work, and of an instance in a chunk (a message for several, :mod:`.chunks`), follow the
same policy here: the instance is recorded and re-sent alone.

A chunk of quick instances takes steps 3 and 4 for all of them at once: they start in one store
step and their results are stored in one (:meth:`Executor.run_chunk`), so a no-op node costs a
fraction of a store transaction rather than two.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from dramatiq.common import compute_backoff
from pydantic import BaseModel, ValidationError

from genloop.sdk.errors import Cancelled, NotFound, Permanent, StoreError
from genloop.sdk.graph import Node

from ..artifacts.base import ArtifactStore
from ..middleware.attempts import record_outcome
from ..ops.registry import OpRegistry, OpSpec
from ..ops.typed_inputs import model_path, output_model
from ..stores.base import StateStore
from ..stores.holders import process_tag
from ..stores.records import InstanceRecord, ItemRef, ResultRecord
from ..stores.steps import Started
from .agent_refine import AnswerWatch
from .batch_queue import HandedBack, hand_back_all
from .context import OpContext
from .deferred import Deferred
from .keys import result_key
from .scheduler import Claim, Scheduler, Succeeded

log = logging.getLogger(__name__)

#: Longest wait before a delivery that found its key leased looks again (seconds).
LEASE_POLL_CAP = 0.5
#: A chunk's instances start and store their results together when its first one's op body
#: took less than this (seconds); a result waits about this long at most for the others'
#: before it is stored.
TOGETHER_BELOW = 0.02


@dataclass(frozen=True)
class _Prepared:
    """An instance ready to claim: its node, op, validated params and result key."""

    inst: InstanceRecord
    node: Node
    spec: OpSpec
    params: BaseModel
    key: str

    def succeeded(self, attempt: int, result: ResultRecord, owner: str) -> Succeeded:
        """This instance's attempt ``attempt`` done with ``result`` under ``owner``'s lease."""
        return Succeeded(self.inst.model_copy(update={"attempts": attempt}), result,
                         (self.key, owner))


@dataclass(frozen=True)
class _InFlight:
    """Deferred work of this process: its instance, attempt and lease."""

    inst: InstanceRecord
    attempt: int
    key: str
    owner: str


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
        self._stop = threading.Event()

    @contextmanager
    def hold(self, key: str, owner: str) -> Iterator[None]:
        """Keep ``owner``'s claim on ``key`` alive while the block runs, then release it."""
        self.keep(key, owner)
        try:
            yield
        finally:
            self.drop(key, owner)

    def keep(self, key: str, owner: str) -> None:
        """Renew ``owner``'s claim on ``key`` until :meth:`drop` or :meth:`forget`."""
        with self._lock:
            self._held[owner] = key
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew_forever, daemon=True, name="genloop-leases"
                )
                self._thread.start()

    def drop(self, key: str, owner: str) -> None:
        """Stop renewing and release the claim."""
        self.forget(owner)
        self.store.release(key, owner)

    def forget(self, owner: str) -> None:
        """Stop renewing ``owner``'s claim without releasing it: the completion that follows
        drops it in the same step that stores the result."""
        with self._lock:
            self._held.pop(owner, None)

    def stop(self) -> None:
        """Stop renewing (the store is closing): the leases still held run out by themselves."""
        self._stop.set()

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            with self._lock:
                held = list(self._held.items())
            for owner, key in held:
                try:
                    if not self.store.renew(key, owner, self.ttl) and owner in self._held:
                        # Expired before renewal (a stalled process): a twin may run now.
                        log.warning("lost the lease on %s", key)
                except Exception:  # a store hiccup must not kill renewal of the others
                    log.exception("renewing the lease on %s failed", key)


class InputResults:
    """Recently read input results, parsed, by key. A stored result never changes, so keeping
    one is always right; without it every item of a map over N items reads and parses its
    parent's whole N-item result, N times (quadratic: a 10,000-item map spent most of its time
    there). One thread loads a key while the others wait for it: a map's first items reach
    every worker thread at once."""

    def __init__(self, store: StateStore, size: int = 32) -> None:
        self.store, self.size = store, size
        self._kept: OrderedDict[str, ResultRecord] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def get(self, key: str) -> ResultRecord | None:
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                if key in self._kept:
                    return self._kept[key]
            result = self.store.get_result(key)
            with self._lock:
                self._loading.pop(key, None)
                if result is not None:
                    self._kept[key] = result
                    while len(self._kept) > self.size:
                        self._kept.popitem(last=False)
        return result

    def get_many(self, keys: Sequence[str]) -> dict[str, ResultRecord]:
        """The results of ``keys`` (distinct), the ones not kept read in one store call: a
        reducer over a 10,000-item map made 10,000 round trips to read its inputs."""
        found: dict[str, ResultRecord] = {}
        with self._lock:
            for key in keys:
                if key in self._kept:
                    found[key] = self._kept[key]
        missing = [key for key in keys if key not in found]
        if missing:
            loaded = self.store.get_results(missing)
            found.update(loaded)
            with self._lock:
                for key in missing[-self.size:]:
                    if key in loaded:
                        self._kept[key] = loaded[key]
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        return found


class Executor:
    """Runs instances. One per worker process; called from many worker threads.

    ``requeue(instance, retries, delay)`` re-sends a message whose deferred work failed and may
    be retried (``retries``: attempts used so far).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        artifacts: ArtifactStore,
        registry: OpRegistry,
        *,
        resources: object = None,
        lease_ttl: float = 30.0,
        attempt_of: Callable[[], int] = lambda: 1,
        requeue: Callable[[InstanceRecord, int, float], None] | None = None,
        completion_threads: int = 2,
    ) -> None:
        self.scheduler = scheduler
        self.store = scheduler.store
        self.artifacts = artifacts
        self.registry = registry
        self.resources = resources
        self.lease_ttl = lease_ttl
        self.leases = LeaseKeeper(self.store, lease_ttl)
        self.answers = AnswerWatch()
        self.owner = f"worker-{uuid.uuid4().hex[:12]}{process_tag()}"
        self._executions = itertools.count()  # next() is atomic under the GIL
        self._attempt_of = attempt_of
        self._requeue = requeue
        self._completions = ThreadPoolExecutor(completion_threads,
                                               thread_name_prefix="genloop-complete")
        self._inputs = InputResults(self.store)
        self._in_flight: dict[str, _InFlight] = {}  # owner token -> deferred work
        self._finishing: set[str] = set()  # owner tokens whose completion is storing
        self._settled = threading.Condition()
        self._draining = False

    def __call__(self, run_id: str, instance_ids: str | list[str]) -> None:
        """Run a message's instances: one (``instance_ids`` a string), or a chunk."""
        if isinstance(instance_ids, str):
            self.run_one(run_id, instance_ids)
        else:
            self.run_chunk(run_id, instance_ids)

    def run_chunk(self, run_id: str, instance_ids: list[str]) -> None:
        """Run a chunk's instances (:mod:`.chunks`). An instance that fails is recorded and
        re-sent alone, as deferred work is: the message carries the others, so it must not
        fail for one of them. The first starts alone; if its op body took less than
        :data:`TOGETHER_BELOW`, the others start in one store step and all the results,
        the first's included, are stored in one (or a few, see :meth:`_run_together`): three
        store steps for a chunk of quick instances rather than two for each."""
        attempt = self._attempt_of()
        try:
            body_seconds, first = self._start_and_run(run_id, instance_ids[0], attempt)
        except Exception as exc:  # noqa: BLE001  (this instance's failure: retry policy)
            self._member_failed(run_id, instance_ids[0], attempt, exc)
            body_seconds, first = math.inf, None  # a failure says nothing of the others' speed
        rest = instance_ids[1:]
        if rest and body_seconds < TOGETHER_BELOW:
            self._run_together(run_id, rest, attempt, [first] if first else [])
            return
        if first is not None:
            self._store_results([first])
        for instance_id in rest:
            try:
                self.run_one(run_id, instance_id)
            except Exception as exc:  # noqa: BLE001
                self._member_failed(run_id, instance_id, attempt, exc)

    def run_one(self, run_id: str, instance_id: str) -> None:
        """Run one instance (steps 1-5 above); an op's failure propagates."""
        _, done = self._start_and_run(run_id, instance_id, self._attempt_of())
        if done is not None:
            self.scheduler.succeeded(run_id, instance_id, done.result, lease=done.lease,
                                     started=done.inst)

    def _start_and_run(self, run_id: str, instance_id: str,
                       attempt: int) -> tuple[float, Succeeded | None]:
        """Steps 1-5 for one instance but storing its result: the seconds its op body took (0
        if none ran) and, if it produced a result, what the caller must store."""
        prepared = self._prepare(run_id, instance_id)
        if prepared is None:
            return 0.0, None
        owner = self._new_owner()
        outcome, lease = self.scheduler.claim_and_start(prepared.inst, attempt, prepared.key,
                                                        owner, self.lease_ttl)
        if not self._claimed(prepared, outcome, lease):
            return 0.0, None
        self.leases.keep(prepared.key, owner)
        began = time.monotonic()
        result = self._execute(prepared, attempt, owner)
        body_seconds = time.monotonic() - began
        if result is None:
            return body_seconds, None
        return body_seconds, prepared.succeeded(attempt, result, owner)

    def _member_failed(self, run_id: str, instance_id: str, attempt: int,
                       exc: Exception) -> None:
        try:
            self._attempt_failed(self.store.instance(run_id, instance_id), attempt, exc)
        except Exception:  # a store outage: the sweeper re-sends it once it is stale
            log.exception("%s/%s: recording a chunk's failed instance failed",
                          run_id, instance_id)

    def _run_together(self, run_id: str, instance_ids: list[str], attempt: int,
                      done: list[Succeeded]) -> None:
        """Start ``instance_ids`` in one store step, run them one after another, and store
        their results with those already ``done`` in one step, or in several if the instances
        turn out slow: results that have waited :data:`TOGETHER_BELOW` are stored before the
        next instance runs. Their leases are renewed from the start, so the last may wait
        behind the others."""
        waiting_since = time.monotonic() if done else 0.0
        members: list[tuple[_Prepared, str]] = []
        for instance_id in instance_ids:
            try:
                prepared = self._prepare(run_id, instance_id)
            except Exception as exc:  # noqa: BLE001  (a bad op or params: this one fails)
                self._member_failed(run_id, instance_id, attempt, exc)
                continue
            if prepared is not None:
                members.append((prepared, self._new_owner()))
        started: list[tuple[_Prepared, str]] = []
        try:
            outcomes = self.scheduler.claim_and_start_many(
                [Claim(p.inst, attempt, p.key, owner) for p, owner in members], self.lease_ttl)
            for (prepared, owner), (outcome, lease) in zip(members, outcomes, strict=True):
                try:
                    if outcome == Started.MISSING:
                        raise NotFound(f"no instance {prepared.inst.instance_id!r} in run "
                                       f"{run_id!r}")
                    if self._claimed(prepared, outcome, lease):
                        self.leases.keep(prepared.key, owner)
                        started.append((prepared, owner))
                except Exception as exc:  # noqa: BLE001
                    self._member_failed(run_id, prepared.inst.instance_id, attempt, exc)
            while started:
                prepared, owner = started.pop(0)
                try:
                    result = self._execute(prepared, attempt, owner)
                except Exception as exc:  # noqa: BLE001
                    self._member_failed(run_id, prepared.inst.instance_id, attempt, exc)
                    continue
                if result is not None:
                    waiting_since = waiting_since or time.monotonic()
                    done.append(prepared.succeeded(attempt, result, owner))
                if done and time.monotonic() - waiting_since >= TOGETHER_BELOW:
                    self._store_results(done)
                    done, waiting_since = [], 0.0
        finally:
            # Stopped early (the claim failed, the worker is shutting down): what ran is
            # stored, what did not run gives its lease back, and its redelivery or the
            # sweeper runs it.
            self._store_results(done)
            for prepared, owner in started:
                self.leases.drop(prepared.key, owner)

    def _store_results(self, done: list[Succeeded]) -> None:
        if not done:
            return
        try:
            self.scheduler.succeeded_many(done)
        except Exception:  # the store stayed away: the leases run out, the sweeper re-sends
            log.exception("storing %d results of a chunk failed", len(done))

    def _new_owner(self) -> str:
        """One lease token per execution: two threads of this process are two claimants."""
        return f"{self.owner}/{next(self._executions)}"

    def _prepare(self, run_id: str, instance_id: str) -> _Prepared | None:
        """The instance, its op and validated params, and its result key; ``None`` if it has
        ended (a duplicate delivery, a cancelled run)."""
        inst = self.scheduler.just_sent.take(run_id, instance_id) \
            or self.store.instance(run_id, instance_id)
        if inst.status.terminal:
            return None
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
        return _Prepared(inst, node, spec, params, key)

    def _claimed(self, prepared: _Prepared, outcome: Started, lease: float) -> bool:
        """Act on a claim's outcome (steps 2-3 above); True if this execution may run the body."""
        inst, key = prepared.inst, prepared.key
        if outcome == Started.STORED:
            stored = self.store.get_result(key)
            if stored is not None:  # None: deleted since (retention), or the store lost it
                self.scheduler.succeeded(inst.run_id, inst.instance_id, stored, cached=True,
                                         started=inst)
                return False
            outcome, lease = Started.LEASED, 0.0
        if outcome == Started.LEASED:
            # Look again soon rather than after the whole lease: the holder usually finishes
            # long before its lease would run out, and then the stored result completes us.
            delay = min(max(lease, 0.05), LEASE_POLL_CAP)
            log.debug("%s/%s: key %s is leased elsewhere; looking again in %.2fs",
                      inst.run_id, inst.instance_id, key[:12], delay)
            # Between looks the message waits in a worker's delay heap, which no backlog
            # counts: the claim step touched the instance, so the sweeper does not take it for
            # lost.
            self.scheduler.enqueue([inst], delay)
            return False
        return outcome == Started.STARTED

    def _execute(self, prepared: _Prepared, attempt: int, owner: str) -> ResultRecord | None:
        """Run the body under ``owner``'s lease (kept by the caller); its result, or ``None``
        if the body deferred its work (step 5 above). On failure the lease is dropped and the
        error propagates."""
        inst, spec, key = prepared.inst, prepared.spec, prepared.key
        try:
            inputs, parents = self._load_inputs(inst.inputs)
            graph = self.scheduler.topology(inst.run_id).graph
            ctx = OpContext(
                run_id=inst.run_id, node_id=inst.node_id, instance_id=inst.instance_id,
                attempt=inst.attempts, store=self.store, artifacts=self.artifacts,
                resources=self.resources, answers=self.answers,
                siblings=_siblings(prepared.node, spec, parents) if attempt == 1 else 1,
                priority=graph.priority or "interactive", namespace=graph.namespace,
            )
            output = spec.fn(prepared.params, inputs, ctx)
            if isinstance(output, Deferred):
                self._defer(output, spec, inst, key, owner, ctx, attempt)
                return None
            result = self._record(spec, output, key, ctx)
        except BaseException:
            self.leases.drop(key, owner)
            raise
        # The completion stores the result and drops the lease in one step, so a twin waiting
        # on the lease finds the result the moment the lease is gone. (Should it fail, the
        # lease runs out unrenewed and the sweeper re-sends the instance.)
        self.leases.forget(owner)
        return result

    @property
    def draining(self) -> bool:
        """Whether :meth:`start_draining` has been called (the worker is stopping)."""
        return self._draining

    @property
    def deferred(self) -> int:
        """Instances whose deferred work is in flight here."""
        return len(self._in_flight)

    def start_draining(self) -> None:
        """The worker is stopping (SIGTERM): from now on, deferred work that no resource has
        started is handed back (:meth:`drain`), this process's queued requests at once."""
        self._draining = True
        hand_back_all()

    def drain(self, grace: float) -> int:
        """Hand back what has not started, wait up to ``grace`` seconds for the deferred work
        that has to complete, and hand back what is still unfinished then; how many instances
        were handed back at the end. Handing back releases the lease and re-sends the instance
        at the same attempt (no retry is spent), so another worker takes it at once instead of
        after the lease ran out. Work given up that completes later here is dropped."""
        self.start_draining()
        deadline = time.monotonic() + grace
        with self._settled:
            while self._in_flight and (left := deadline - time.monotonic()) > 0:
                self._settled.wait(left)
            unfinished = [work for owner, work in self._in_flight.items()
                          if owner not in self._finishing]
            for work in unfinished:
                del self._in_flight[work.owner]
            # Completions under way are storing their results: a few store steps.
            self._settled.wait_for(lambda: not self._in_flight, timeout=grace)
        for work in unfinished:
            self._give_back(work)
        if unfinished:
            log.warning("handed back %d unfinished instance(s) after a %.0fs grace",
                        len(unfinished), grace)
        return len(unfinished)

    def _give_back(self, work: _InFlight) -> None:
        """Release ``work``'s lease and re-send its instance at the same attempt."""
        inst = work.inst
        try:
            self.leases.drop(work.key, work.owner)
            if self._requeue is not None:  # else the sweeper re-sends it: the lease is gone
                self._requeue(inst, work.attempt - 1, 0.0)
            log.info("%s/%s handed back", inst.run_id, inst.instance_id)
        except Exception:  # a store or broker outage: the lease runs out, the sweeper re-sends
            log.exception("%s/%s: handing back failed", inst.run_id, inst.instance_id)

    def close(self) -> None:
        """Stop the completion pool and the lease renewals (deferred work still in flight is
        abandoned: its lease runs out and the sweeper sends it again), and stop watching for
        agents' answers in this executor's store before it closes."""
        self.answers.close()
        self.leases.stop()
        self._completions.shutdown(wait=False, cancel_futures=True)

    def _defer(self, deferred: Deferred, spec: OpSpec, inst: InstanceRecord, key: str,
               owner: str, ctx: OpContext, attempt: int) -> None:
        with self._settled:
            self._in_flight[owner] = _InFlight(inst, attempt, key, owner)

        def finish(future: Future) -> None:
            try:
                self._completions.submit(self._finish, deferred, spec, inst, key, owner, ctx,
                                         attempt)
            except RuntimeError:  # the pool is shut down: the process is stopping
                try:
                    self.leases.drop(key, owner)
                except StoreError:  # its store is closed too: the lease runs out instead
                    pass

        deferred.future.add_done_callback(finish)
        if self._draining:  # a message taken just before the worker threads stopped
            hand_back_all()

    def _finish(self, deferred: Deferred, spec: OpSpec, inst: InstanceRecord, key: str,
                owner: str, ctx: OpContext, attempt: int) -> None:
        run_id, instance_id = inst.run_id, inst.instance_id
        with self._settled:
            work = self._in_flight.get(owner)
            if work is None:
                return  # handed back when a drain's grace ran out
            self._finishing.add(owner)
        settled = False  # stored, or handed back: the lease is dealt with
        try:
            try:
                result = self._record(spec, deferred.then(deferred.future.result()), key, ctx)
            except HandedBack:
                settled = True
                self._give_back(work)
            except Exception as exc:  # noqa: BLE001  (the op's failure: retry policy below)
                self._attempt_failed(inst, attempt, exc)
            else:
                self.leases.forget(owner)
                self.scheduler.succeeded(run_id, instance_id, result, lease=(key, owner))
                settled = True
        except Exception:  # a store outage: the lease runs out and the sweeper re-sends it
            log.exception("%s/%s: completing deferred work failed", run_id, instance_id)
        finally:
            if not settled:
                self.leases.drop(key, owner)
            with self._settled:
                self._in_flight.pop(owner, None)
                self._finishing.discard(owner)
                self._settled.notify_all()

    def _attempt_failed(self, inst: InstanceRecord, attempt: int, exc: Exception) -> None:
        """What Retries and AttemptOutcomes do for a message, for an instance whose message is
        not retried for it: deferred work (the message is acked) and a chunk's instances."""
        final = (isinstance(exc, Permanent) or attempt > inst.max_retries
                 or self._requeue is None)
        record_outcome(self.scheduler, inst.run_id, inst.instance_id, attempt, exc, final=final)
        if not final and not isinstance(exc, Cancelled) and self._requeue is not None:
            _, backoff_ms = compute_backoff(attempt - 1, factor=int(inst.min_backoff * 1000),
                                            max_backoff=int(inst.max_backoff * 1000))
            self._requeue(inst, attempt, backoff_ms / 1000)

    def _record(self, spec: OpSpec, output: object, key: str, ctx: OpContext) -> ResultRecord:
        items: list[BaseModel] = []
        for item in output if isinstance(output, list) else [output]:
            if not isinstance(item, BaseModel):
                raise Permanent(f"op {spec.name!r} returned {type(item).__name__}, "
                                "expected a pydantic model or a list of them")
            items.append(item)
        return ResultRecord(
            key=key, op=spec.name, items=[i.model_dump(mode="json") for i in items],
            output=model_path(spec.output), halt=ctx.halted, created_at=time.time(),
        )

    def _load_inputs(self, refs: Sequence[ItemRef]) -> tuple[list, dict[str, ResultRecord]]:
        keys = list(dict.fromkeys(ref.key for ref in refs))
        if len(keys) == 1:  # a map's item: every item of the map reads the same one
            result = self._inputs.get(keys[0])
            results = {keys[0]: result} if result is not None else {}
        else:
            results = self._inputs.get_many(keys)
        items = []
        for ref in refs:
            result = results.get(ref.key)
            if result is None:
                raise Permanent(f"input result {ref.key} is missing from the store")
            model = output_model(self.registry, result)
            raw = result.items[ref.index]
            items.append(model.model_validate(raw) if model is not None else raw)
        return items, results


def _siblings(node: Node, spec: OpSpec, parents: dict[str, ResultRecord]) -> int:
    """How many instances of ``node`` run alongside this one (a hint for batching): a map
    node's items (of its input's result), or a sharded node's shards."""
    if node.map:
        return max(1, sum(len(r.items) for r in parents.values()))
    fields = spec.params.model_fields
    if {"n", "shard_size"} <= fields.keys() and not node.inputs:
        n = node.params.get("n", fields["n"].default)
        size = node.params.get("shard_size", fields["shard_size"].default)
        return max(1, math.ceil(n / size))
    return 1
