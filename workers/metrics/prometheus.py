"""genloop's Prometheus metrics: one object owns them, on a registry of its own.

Where they come from (no calls sprinkled through the runtime):
- runs, nodes, instances, op durations, retries and failures: the events each process commits
  to the state store, seen by :class:`~genloop.workers.metrics.tap.MeteredStore` after commit;
- queue waits: the :class:`~genloop.workers.middleware.metrics.QueueWait` Dramatiq middleware;
- engine batch sizes, images and step-cache skips: the engine's batch call; resident models and
  their bytes: read from each live model registry at scrape time; model loads: the registry's
  load;
- lease takeovers and sweeper re-sends: the sweeper's recovery pass.

Label sets stay bounded: op, queue, status, kind, reason and model come from small fixed or
operator-configured sets; an error type is an exception's class name, and past
:data:`MAX_ERROR_TYPES` distinct ones the rest count as ``other``. Run, node and instance ids
are never labels.

The process's object is made on first use (:func:`metrics`), never at import. ``genloop serve``
serves it at ``/metrics``; ``genloop worker --metrics-port`` on a port of each worker process.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..stores.records import EventRecord

MAX_ERROR_TYPES = 50
#: Instances started in this process whose end is not seen yet (bounded: a takeover elsewhere
#: never ends here).
MAX_STARTED = 100_000
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
_RUN_STATUSES = {"run.submitted": "submitted", "run.succeeded": "succeeded",
                 "run.failed": "failed", "run.cancelled": "cancelled"}
_NODE_STATUSES = {"queued", "succeeded", "failed", "skipped", "cancelled"}
_INSTANCE_ENDS = {"succeeded", "failed", "cancelled"}

#: ``(run id, node id) -> (op, queue)``: what an event's node runs and where.
OpOf = Callable[[str, str], tuple[str, str]]


class Metrics:
    """Every genloop metric, on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.runs = Counter("genloop_runs", "Runs that reached a status (submitted, "
                            "succeeded, failed, cancelled)", ["status"], registry=r)
        self.nodes = Counter("genloop_nodes", "Nodes that reached a status", ["op", "status"],
                             registry=r)
        self.instances = Counter("genloop_instances", "Node instances that ended, by outcome",
                                 ["op", "status"], registry=r)
        self.result_reuses = Counter("genloop_result_reuses", "Instances completed from a "
                                     "stored result, without running the op", ["op"], registry=r)
        self.op_duration = Histogram("genloop_op_duration_seconds", "An instance's start to "
                                     "its end (the op body and any batched work it handed on)",
                                     ["op", "queue"], buckets=DURATION_BUCKETS, registry=r)
        self.queue_wait = Histogram("genloop_queue_wait_seconds", "A message's enqueue (or the "
                                    "end of its delay) to a worker taking it", ["queue"],
                                    buckets=DURATION_BUCKETS, registry=r)
        self.retries = Counter("genloop_retries", "Failed attempts that will be retried",
                               ["op", "error_type"], registry=r)
        self.failures = Counter("genloop_failures", "Instances failed for good",
                                ["op", "error_type"], registry=r)
        self.batch_size = Histogram("genloop_engine_batch_size", "Images per engine batch",
                                    ["kind"], buckets=BATCH_BUCKETS, registry=r)
        self.images = Counter("genloop_images_generated", "Images the engine generated "
                              "(rate() is images per second)", registry=r)
        self.step_cache_skips = Counter("genloop_step_cache_skips", "UNet calls the step cache "
                                        "(DeepCache) answered from kept features", registry=r)
        self.steps_reused = Counter("genloop_steps_reused", "Denoising steps skipped by "
                                    "starting from a similar prompt's stored latents "
                                    "(reuse='auto')", registry=r)
        self.lease_takeovers = Counter("genloop_lease_takeovers", "Running instances re-sent "
                                       "because their holder's lease ended", registry=r)
        self.sweeper_resends = Counter("genloop_sweeper_resends", "Messages the sweeper re-sent, "
                                       "by reason (outbox, lease_ended, message_lost)",
                                       ["reason"], registry=r)
        self.model_loads = Counter("genloop_model_loads", "Models loaded into memory, by "
                                   "model (a pool that thrashes loads the same ones again)",
                                   ["model"], registry=r)
        self.model_load_time = Histogram("genloop_model_load_seconds", "Seconds a model's load "
                                         "took", ["model"], buckets=DURATION_BUCKETS, registry=r)
        self.artifacts = Gauge("genloop_artifacts", "Artifacts stored, as this process's last "
                               "collection counted them", registry=r)
        self.artifact_bytes = Gauge("genloop_artifact_bytes", "Bytes of the artifacts stored, "
                                    "as this process's last collection counted them", registry=r)
        self.expired = Counter("genloop_expired", "Runs, results and artifacts deleted by the "
                               "retention and the collector", ["kind"], registry=r)
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._error_types: set[str] = set()
        self._started: OrderedDict[tuple[str, str, int | None], tuple[float, str, str]] = (
            OrderedDict())
        self._lock = threading.Lock()
        self._models = _ResidentModels()
        r.register(self._models)

    def _child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, kept once made: ``labels`` checks its arguments and takes
        a lock on every call (about 25 us; two or three per node), and the label sets are
        bounded (see above), so the children kept are too. Two threads making the same child at
        once get the same one from ``labels``."""
        child = self._children.get((metric, values))
        if child is None:
            child = self._children[(metric, values)] = metric.labels(*values)
        return child

    # -- events ---------------------------------------------------------------------------------
    def observe(self, run_id: str, event: EventRecord, op_of: OpOf) -> None:
        """Count a committed event of ``run_id``."""
        kind = event.type
        if kind in _RUN_STATUSES:
            self._child(self.runs, _RUN_STATUSES[kind]).inc()
            return
        if event.node_id is None:
            return
        if kind.startswith("node.") and kind[5:] in _NODE_STATUSES:
            self._child(self.nodes, op_of(run_id, event.node_id)[0], kind[5:]).inc()
        elif kind.startswith("instance.") and event.instance_id is not None:
            self._instance(run_id, event, kind[9:], op_of)

    def _instance(self, run_id: str, event: EventRecord, what: str, op_of: OpOf) -> None:
        # Keyed by attempt too: Dramatiq re-sends a failed attempt before its retry event is
        # written, so the next attempt's start may be seen before the last one's end.
        key = (run_id, event.instance_id or "", event.attempt)
        if what == "started":
            op, queue = op_of(run_id, event.node_id or "")
            with self._lock:
                self._started[key] = (event.time, op, queue)
                while len(self._started) > MAX_STARTED:
                    self._started.popitem(last=False)
            return
        if what not in _INSTANCE_ENDS and what != "retry":
            return
        with self._lock:
            started = self._started.pop(key, None)
        op = started[1] if started else op_of(run_id, event.node_id or "")[0]
        if started is not None:
            self._child(self.op_duration, op, started[2]).observe(
                max(event.time - started[0], 0.0))
        if what == "retry":
            self._child(self.retries, op, self._error_type(event.error)).inc()
            return
        self._child(self.instances, op, what).inc()
        if what == "failed":
            self._child(self.failures, op, self._error_type(event.error)).inc()
        elif started is None and (event.message or "").endswith("cached"):
            self._child(self.result_reuses, op).inc()

    def _error_type(self, error: str | None) -> str:
        name = (error or "").split(":", 1)[0].strip() or "unknown"
        if not name.isidentifier():
            name = "other"
        with self._lock:
            if name not in self._error_types:
                if len(self._error_types) >= MAX_ERROR_TYPES:
                    return "other"
                self._error_types.add(name)
        return name

    # -- the engine, models and queues -------------------------------------------------------
    def engine_batch(self, kind: str, size: int) -> None:
        self._child(self.batch_size, kind).observe(size)

    def model_loaded(self, model: str, seconds: float) -> None:
        self._child(self.model_loads, model).inc()
        self._child(self.model_load_time, model).observe(seconds)

    def watch_models(self, registry: Any) -> None:
        """Report ``registry``'s resident models (a ``ModelRegistry``) while it lives."""
        self._models.add(registry)

    def expired_now(self, runs: int, results: int) -> None:
        """A retention pass deleted these."""
        self._child(self.expired, "runs").inc(runs)
        self._child(self.expired, "results").inc(results)

    def artifacts_collected(self, kept: int, kept_bytes: int, deleted: int) -> None:
        """A collection deleted ``deleted`` artifacts and left ``kept`` (``kept_bytes``)."""
        self.artifacts.set(kept)
        self.artifact_bytes.set(kept_bytes)
        self._child(self.expired, "artifacts").inc(deleted)

    def queue_waited(self, queue: str, seconds: float) -> None:
        self._child(self.queue_wait, queue).observe(max(seconds, 0.0))


class _ResidentModels(Collector):
    """Resident models and their bytes, read from the live model registries at scrape time."""

    def __init__(self) -> None:
        self._registries: weakref.WeakSet = weakref.WeakSet()

    def add(self, registry: Any) -> None:
        self._registries.add(registry)

    def collect(self) -> Iterator[Metric]:
        sizes: dict[str, int] = {}
        for registry in list(self._registries):
            for name, nbytes in registry.residency.sizes().items():
                sizes[name] = sizes.get(name, 0) + nbytes
        count = GaugeMetricFamily("genloop_resident_models", "Models resident in memory")
        count.add_metric([], len(sizes))
        memory = GaugeMetricFamily("genloop_resident_model_bytes",
                                   "Bytes of a resident model's weights", labels=["model"])
        for name, nbytes in sorted(sizes.items()):
            memory.add_metric([name], nbytes)
        yield count
        yield memory


_process: Metrics | None = None
_process_lock = threading.Lock()


def metrics() -> Metrics:
    """This process's metrics, made on first use."""
    global _process
    with _process_lock:
        if _process is None:
            _process = Metrics()
        return _process



def serve_metrics(first_port: int, tries: int = 1, host: str = "127.0.0.1") -> int:
    """Serve this process's metrics over HTTP on the first free port of ``first_port`` ..
    ``first_port + tries - 1`` (each process of ``genloop worker --processes N`` takes its own);
    returns the port."""
    from prometheus_client import start_http_server

    for port in range(first_port, first_port + max(tries, 1)):
        try:
            start_http_server(port, addr=host, registry=metrics().registry)
        except OSError:
            continue
        return port
    raise OSError(f"no free metrics port in {first_port}..{first_port + max(tries, 1) - 1}")
