"""The pool as an operator or an autoscaler sees it: which workers live, what each holds and
does, and how much work waits, per queue and per model, in seconds of work.

Every worker process publishes a presence record (:class:`Presence`, a Dramatiq middleware)
every :data:`HEARTBEAT` seconds into one Redis hash: its queues and threads, resident models,
its engine's running batch and queued images, its deferred work, whether it is draining, and
each model's measured seconds per image step (``GenerationEngine.step_seconds``). A record not
renewed for :data:`STALE_AFTER` seconds is a dead worker's; readers drop it.

:func:`pool_status` adds the work the state store holds unfinished: per queue the instances
queued (no worker has started them) and started; per model the images of unfinished generate
instances and the seconds of work they are, ``images x steps x`` the model's step time (the
live workers' measures, each weighted by the images it rests on, :func:`mean_step_seconds`;
``None`` until one has measured it). Seconds are device time
at the batch sizes the pool runs: a pool of N workers of a model clears them in about a Nth of
it. It reads every unfinished instance (one store read per run holding some), which suits an
endpoint scraped every few seconds, not a hot path.

:class:`BacklogCollector` serves the same figures as Prometheus gauges (``genloop pool
exporter``), for an autoscaler such as KEDA to read; genloop scales no processes itself.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import redis
from dramatiq.middleware import Middleware
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, Field

from genloop.sdk.models import NodeStatus, RunInfo

from ..stores.base import StateStore
from ..stores.records import Storage

log = logging.getLogger(__name__)

#: Seconds between a worker's presence records.
HEARTBEAT = 2.0
#: A presence record older than this is a dead worker's.
STALE_AFTER = 3 * HEARTBEAT
#: The most unfinished instances one status read looks at.
MAX_INSTANCES = 100_000


def workers_key(prefix: str) -> str:
    """The hash of presence records: worker id -> JSON."""
    return f"{prefix}:pool:workers"


class WorkerState(BaseModel):
    """One worker process, as it last said."""

    id: str
    host: str
    pid: int
    queues: list[str]
    threads: int
    started: float
    seen: float
    draining: bool = False
    models: list[str] = Field(default_factory=list, description="model names it serves")
    resident: list[str] = Field(default_factory=list, description="models in memory")
    loads: dict[str, int] = Field(default_factory=dict, description="model loads so far")
    load_seconds: dict[str, float] = Field(default_factory=dict,
                                           description="each model's last load, seconds")
    running: tuple[str, int] | None = Field(None, description="(model, images) on the device")
    queued_images: dict[str, int] = Field(default_factory=dict,
                                          description="waiting in its engine, per model")
    batch_limit: int | None = Field(None, description="the most images its engine's last "
                                    "batch's kind takes")
    deferred: int = Field(0, description="instances waiting on its engine or scorer")
    step_seconds: dict[str, float] = Field(default_factory=dict,
                                           description="measured seconds per image step")
    step_images: dict[str, int] = Field(default_factory=dict,
                                        description="images step_seconds was measured on")
    default_steps: dict[str, int] = Field(default_factory=dict)


class QueueBacklog(BaseModel):
    queue: str
    queued: int = Field(description="unfinished instances no worker has started")
    started: int = Field(description="unfinished instances a worker has started")
    workers: int = Field(description="live workers consuming this queue")


class ModelBacklog(BaseModel):
    model: str
    instances: int
    images: int
    seconds: float | None = Field(description="estimated device seconds of work; None until "
                                  "a live worker has measured the model")
    workers: int = Field(description="live workers holding it in memory")


class PoolStatus(BaseModel):
    """``GET /v1/pool`` and ``genloop pool status``."""

    at: float
    workers: list[WorkerState]
    queues: list[QueueBacklog]
    models: list[ModelBacklog]
    storage: Storage | None = Field(None, description="what the pool's state store holds")


class Presence(Middleware):
    """A worker process's presence record, written every :data:`HEARTBEAT` s while it lives
    and removed when it stops. ``executor`` and ``resources`` are the process's."""

    def __init__(self, client: redis.Redis, prefix: str, executor: Any, resources: Any,
                 queues: list[str]) -> None:
        self.client, self.key = client, workers_key(prefix)
        self.executor, self.resources, self.queues = executor, resources, queues
        self.id = executor.owner
        self.models = sorted(resources.served_models())
        self.started = time.time()
        self._threads = 0
        self._stop = threading.Event()

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._threads = worker.worker_threads
        # The first beat is the thread's (see RedisFairWorker.after_worker_boot)
        threading.Thread(target=self._beat_forever, daemon=True, name="genloop-presence").start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        try:
            self.beat()  # says it is draining
        except redis.RedisError:  # the shutdown goes on; the record goes stale
            log.exception("publishing this worker's draining failed")

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self._stop.set()
        try:
            self.client.hdel(self.key, self.id)
        except redis.RedisError:  # readers drop the record once it is stale
            pass

    def state(self) -> WorkerState:
        held = self.resources.state()
        return WorkerState(
            id=self.id, host=socket.gethostname(), pid=os.getpid(), queues=self.queues,
            threads=self._threads, started=self.started, seen=time.time(), models=self.models,
            draining=self.executor.draining, deferred=self.executor.deferred, **held)

    def beat(self) -> None:
        self.client.hset(self.key, self.id, self.state().model_dump_json())

    def _beat_forever(self) -> None:
        while True:
            try:
                self.beat()
            except Exception:  # noqa: BLE001  (a Redis hiccup must not end the presence)
                log.exception("publishing this worker's presence failed")
            if self._stop.wait(HEARTBEAT):
                return


def live_workers(client: redis.Redis, prefix: str) -> list[WorkerState]:
    """The workers whose presence is fresh; stale records are deleted."""
    now = time.time()
    live: list[tuple[bytes | str, WorkerState]] = []
    stale: list[tuple[bytes | str, WorkerState]] = []
    for worker_id, raw in client.hgetall(workers_key(prefix)).items():
        state = WorkerState.model_validate_json(raw)
        (live if now - state.seen <= STALE_AFTER else stale).append((worker_id, state))
    if stale:
        client.hdel(workers_key(prefix), *(worker_id for worker_id, _ in stale))
    return sorted((state for _, state in live), key=lambda s: (s.host, s.pid))


class RecentWorkers:
    """:func:`live_workers`, read again at most every ``ttl`` seconds (for every thread of the
    process): routing decisions and run status reads ask in loops, and the records change only
    every :data:`HEARTBEAT` s anyway."""

    def __init__(self, client: redis.Redis, prefix: str, ttl: float = 0.5) -> None:
        self.client, self.prefix, self.ttl = client, prefix, ttl
        self._lock = threading.Lock()
        self._read: tuple[float, list[WorkerState]] = (-ttl, [])

    def __call__(self) -> list[WorkerState]:
        with self._lock:
            at, workers = self._read
            if time.monotonic() - at >= self.ttl:
                workers = live_workers(self.client, self.prefix)
                self._read = (time.monotonic(), workers)
            return workers


def pool_status(client: redis.Redis, prefix: str, store: StateStore) -> PoolStatus:
    """Workers and backlog now (see the module's docstring)."""
    workers = live_workers(client, prefix)
    queues: dict[str, QueueBacklog] = {}
    models: dict[str, ModelBacklog] = {}
    steps_of: dict[str, int] = {}
    for w in workers:
        steps_of.update(w.default_steps)
    dumped = [w.model_dump() for w in workers]
    measured = {model: rate for model in {m for w in workers for m in w.step_seconds}
                if (rate := mean_step_seconds(model, dumped)) is not None}
    for q in sorted({q for w in workers for q in w.queues}):
        queues[q] = QueueBacklog(queue=q, queued=0, started=0,
                                 workers=sum(q in w.queues for w in workers))
    for inst, op in _unfinished(store):
        backlog = queues.setdefault(inst.queue, QueueBacklog(
            queue=inst.queue, queued=0, started=0, workers=0))
        if inst.status == NodeStatus.QUEUED:
            backlog.queued += 1
        else:
            backlog.started += 1
        if op != "generate":
            continue
        model = inst.params.get("model") or "default"
        entry = models.setdefault(model, ModelBacklog(
            model=model, instances=0, images=0, seconds=0.0,
            workers=sum(model in w.resident for w in workers)))
        entry.instances += 1
        entry.images += inst.expected_items
        steps = inst.params.get("steps") or steps_of.get(model)
        if entry.seconds is not None and steps and model in measured:
            entry.seconds += inst.expected_items * steps * measured[model]
        else:
            entry.seconds = None
    return PoolStatus(at=time.time(), workers=workers, queues=list(queues.values()),
                      models=sorted(models.values(), key=lambda m: m.model),
                      storage=store.storage())


def mean_step_seconds(model: str, states: list[dict[str, Any]]) -> float | None:
    """``model``'s seconds per image step over these workers' presence records, each worker's
    measure weighted by the images it rests on (a record without the count weighs one image):
    a worker whose only batch ran slow (a cold start, a contended moment) would otherwise
    count as much as one that measured hundreds. Measures that rest on none (a pipeline's
    first batch, its warm-up) count only while no other worker has one. ``None`` if none has
    measured it."""
    pairs = [(w["step_seconds"][model], w.get("step_images", {}).get(model, 1))
             for w in states if w.get("step_seconds", {}).get(model, 0.0) > 0]
    pairs = [(s, n) for s, n in pairs if n > 0] or [(s, 1) for s, _ in pairs]
    weight = sum(n for _, n in pairs)
    return sum(s * n for s, n in pairs) / weight if weight else None


def waiting_for(workers: Callable[[], list[WorkerState]], info: RunInfo,
                needs: Callable[[str], tuple[str, str | None]]) -> str | None:
    """What ``info``'s active nodes wait for that no live worker (``workers()``) provides: a
    worker on their queue serving their model (``needs(node_id)``: the queue, and the model
    of a generate node, else ``None``); ``None`` if each has one."""
    active = [n.node_id for n in info.nodes
              if n.status in (NodeStatus.QUEUED, NodeStatus.RUNNING)]
    if info.status.terminal or not active:
        return None
    live = workers()
    for node_id in active:
        queue, model = needs(node_id)
        if not any(queue in w.queues and (model is None or model in w.models)
                   for w in live):
            return f"a worker on queue {queue!r}" + (
                f" serving model {model!r}" if model is not None else "")
    return None


def _unfinished(store: StateStore) -> Iterator[tuple[Any, str]]:
    """Every unfinished instance and its node's op, one read of instances and spec per run."""
    by_run: dict[str, set[str]] = {}
    for run_id, instance_id in store.stale_instances(0.0, limit=MAX_INSTANCES):
        by_run.setdefault(run_id, set()).add(instance_id)
    for run_id, ids in by_run.items():
        nodes = {n["id"]: n["op"] for n in store.run_spec(run_id).graph.get("nodes", [])}
        for inst in store.instances(run_id):
            if inst.instance_id in ids and not inst.status.terminal:
                yield inst, nodes.get(inst.node_id, "")


class BacklogCollector(Collector):
    """The pool's backlog as Prometheus gauges, read from Redis at each scrape."""

    def __init__(self, client: redis.Redis, prefix: str, store: StateStore) -> None:
        self.client, self.prefix, self.store = client, prefix, store

    def collect(self) -> Iterator[Metric]:
        status = pool_status(self.client, self.prefix, self.store)
        queued = GaugeMetricFamily("genloop_backlog_instances", "Unfinished instances per "
                                   "queue, by state (queued, started)", labels=["queue", "state"])
        workers = GaugeMetricFamily("genloop_pool_workers", "Live worker processes consuming "
                                    "a queue", labels=["queue"])
        for q in status.queues:
            queued.add_metric([q.queue, "queued"], q.queued)
            queued.add_metric([q.queue, "started"], q.started)
            workers.add_metric([q.queue], q.workers)
        images = GaugeMetricFamily("genloop_backlog_images", "Images of unfinished generate "
                                   "instances per model", labels=["model"])
        seconds = GaugeMetricFamily("genloop_backlog_seconds", "Estimated device seconds of "
                                    "unfinished generation per model (NaN: not measured yet)",
                                    labels=["model"])
        for m in status.models:
            images.add_metric([m.model], m.images)
            seconds.add_metric([m.model], float("nan") if m.seconds is None else m.seconds)
        yield from (queued, workers, images, seconds)
        if status.storage is not None:
            stored = status.storage
            runs = GaugeMetricFamily("genloop_stored_runs", "Runs in the state store (all; "
                                     "finished and expiring; pinned)", labels=["kind"])
            for kind, n in (("all", stored.runs), ("expiring", stored.expiring),
                            ("pinned", stored.pinned)):
                runs.add_metric([kind], n)
            size = GaugeMetricFamily("genloop_store_bytes", "Bytes the state store holds "
                                     "(Redis used memory)")
            size.add_metric([], stored.bytes)
            yield from (runs, size)
