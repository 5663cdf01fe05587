"""The metrics agree with the event log: over one run (roots, a child, a retry, a failure, a
generate node) on each state store, every run, node and instance counter moves by exactly the
run's events of its kind, and a preload's warm-up image counts nowhere."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from redis_util import redis_url

from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.artifacts.local import LocalArtifactStore
from genloop.workers.backends.store_backend import StoreBackend
from genloop.workers.metrics.prometheus import metrics
from genloop.workers.ops.registry import default_registry
from genloop.workers.pool.broker import wire
from genloop.workers.stores.redis import RedisStateStore

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples() -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in metrics().registry.collect() for s in family.samples
            if s.name.endswith("_total")}


def _settled(before: Samples, timeout: float = 10) -> Samples:
    """The counters once the run's end is counted: a process counts an event after its commit,
    and ``wait()`` returns on the run's last commit, so the thread that wrote it may not have
    counted it yet."""
    deadline = time.monotonic() + timeout
    while True:
        after = _samples()
        key = ("genloop_runs_total", (("status", "failed"),))
        if after.get(key, 0.0) > before.get(key, 0.0) or time.monotonic() > deadline:
            return after
        time.sleep(0.02)


def _moved(before: Samples, after: Samples) -> dict[tuple, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


@contextmanager
def _redis_client(tmp_path, resources) -> Iterator[Client]:
    """The Redis store's scripts and transactions, with worker threads in this process (its
    metrics are this process's, as a ``genloop worker``'s are its own)."""
    store = RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    broker = StubBroker()
    broker.emit_after("process_boot")
    wiring = wire(broker, store, artifacts, default_registry, resources=resources,
                  lease_ttl=5.0)
    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=50)
    worker.start()
    backend = StoreBackend(wiring.scheduler, artifacts, models=resources.served_models,
                           evaluators=resources.evaluators, refiners=resources.refiners)
    try:
        yield Client(backend)
    finally:
        worker.stop()
        wiring.executor.close()
        broker.close()
        store.close()


@contextmanager
def _sqlite_client(tmp_path, resources) -> Iterator[Client]:
    with Client.local(home=tmp_path / "home", threads=2, resources=resources,
                      lease_ttl=5.0) as client:
        yield client


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_counters_move_by_the_run_s_events(tmp_path, resources, store):
    import genloop_test_ops  # noqa: F401  (test-count: fails as told)

    log = str(tmp_path / "count.log")
    seed = uuid.uuid4().int % 10_000  # images no earlier test stored
    g = Graph()
    gen = g.generate("a red circle", n=3, steps=2, model="tiny", seed=seed, id="gen")
    g.add("test-count", id="child", inputs=[gen], params={"log": log, "value": 1})
    g.add("test-count", id="flaky", params={"log": log, "value": 2, "fail_times": 1},
          max_retries=2, min_backoff=0.01)
    g.add("test-count", id="broken", params={"log": log, "value": 3, "fail_times": 9,
                                             "permanent": True})
    ops = {node.id: node.op for node in g.nodes}
    opened = _redis_client if store == "redis" else _sqlite_client
    with opened(tmp_path, resources) as client:
        # Given the process's counters; When a model is preloaded (its warm-up image is
        # no run's) and the run goes through
        before = _samples()
        resources.models.preload("tiny", warmup=True)
        run = client.submit(g)
        result = run.wait(timeout=120)
        events = list(run.events(follow=False))
        after = _settled(before)

    assert result.status == RunStatus.FAILED  # 'broken' failed for good
    # Then each counter moved by the run's events of its kind, and by nothing else
    expected: Counter = Counter()
    runs = {"run.submitted": "submitted", "run.succeeded": "succeeded",
            "run.failed": "failed", "run.cancelled": "cancelled"}
    for e in events:
        kind, _, what = e.type.partition(".")
        if e.type in runs:
            expected["genloop_runs_total", (("status", runs[e.type]),)] += 1
        elif kind == "node" and what in {"queued", "succeeded", "failed", "skipped",
                                         "cancelled"}:
            expected["genloop_nodes_total", (("op", ops[e.node_id]), ("status", what))] += 1
        elif kind == "instance" and what in {"succeeded", "failed", "cancelled"}:
            expected["genloop_instances_total", (("op", ops[e.node_id]), ("status", what))] += 1
        elif kind == "instance" and what == "retry":
            expected["genloop_retries_total", (("error_type", "Transient"),
                                               ("op", ops[e.node_id]))] += 1
    moved = _moved(before, after)
    counted = {k: v for k, v in moved.items()
               if k[0] in {"genloop_runs_total", "genloop_nodes_total",
                           "genloop_instances_total", "genloop_retries_total"}}
    assert counted == dict(expected)
    # every node queued once, the roots included
    assert sum(v for k, v in counted.items() if ("status", "queued") in k[1]) == len(g.nodes)
    assert moved.get(("genloop_images_generated_total", ())) == 3  # not 4: no warm-up
