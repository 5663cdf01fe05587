"""Retention on every store: expired runs go with their records, results stay while a kept run
needs them, pinned runs never go. Driven by the real scheduler and worker threads; the pass is
given its clock (``now``), so nothing here waits for time to pass."""

from __future__ import annotations

import threading
import time

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from pydantic import BaseModel

from genloop.sdk import Graph
from genloop.sdk.errors import NotFound
from genloop.sdk.graph import RunLimits
from genloop.workers import OpRegistry, op
from genloop.workers.artifacts import LocalArtifactStore
from genloop.workers.pool.broker import wire
from genloop.workers.stores import InstanceRecord, ItemRef, NodeRecord
from genloop.workers.stores.retention import referenced_keys, retention_pass

DAY = 24 * 3600.0
WEEK = 7 * DAY  # the stores' default retention, which a start that reuses a result extends it by


class N(BaseModel):
    n: int


class Bodies:
    """How many times each op's body ran."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def ran(self) -> None:
        with self._lock:
            self.count += 1


@pytest.fixture
def pool(store, tmp_path):
    registry, bodies = OpRegistry(), Bodies()

    def spread(p, inputs, ctx):
        bodies.ran()
        return [N(n=i) for i in range(p.n)]

    def double(p, inputs, ctx):
        bodies.ran()
        return N(n=2 * inputs[0].n)

    gate = threading.Event()
    op("spread", params=N, output=N, registry=registry)(spread)
    op("double", output=N, registry=registry)(double)
    op("hold", output=N, registry=registry)(lambda p, inputs, ctx: gate.wait(30) and N(n=0))
    broker = StubBroker()
    broker.emit_after("process_boot")
    # The sweeper's own retention pass (at its first tick, with the real clock) would take
    # some of the runs these tests hand to theirs: it waits an hour here
    wiring = wire(broker, store, LocalArtifactStore(tmp_path / "art"), registry,
                  queues=("cpu",), sweep_every=3600.0, lease_ttl=30.0)
    worker = dramatiq.Worker(wiring.broker, worker_threads=2, worker_timeout=50)
    worker.start()
    yield wiring.scheduler, bodies, gate
    gate.set()
    worker.stop()


def _graph(n: int = 3) -> Graph:
    g = Graph()
    src = g.add("spread", id="spread", params={"n": n})
    g.add("double", id="each", inputs=[src], map=True)
    return g


def _finished(store, run_id: str):
    deadline = time.monotonic() + 30
    while not (run := store.get_run(run_id)).status.terminal:
        assert time.monotonic() < deadline, f"run still {run.status.value}"
        time.sleep(0.02)
    assert run.status == "succeeded"
    return run


def _keys(store, run_id: str) -> set[str]:
    keys = referenced_keys(store.instances(run_id), store.nodes(run_id))
    assert keys
    return keys


def _counts(store, run_id: str) -> dict[str, int]:
    with store.transaction(run_id) as tx:
        return tx.ended_counts()


def _listed(store) -> set[str]:
    return {r.id for r in store.runs_before(None, 100)}


def test_a_run_is_kept_for_the_retention_then_goes_with_everything_only_it_kept(pool, store):
    scheduler, *_ = pool
    run = _finished(store, scheduler.submit(_graph()).id)
    keys = _keys(store, run.id)

    kept = retention_pass(store, DAY, now=run.finished_at + DAY - 1)
    assert (kept.scheduled, kept.runs, kept.results) == (1, 0, 0)
    assert store.get_run(run.id).status == "succeeded" and run.id in _listed(store)
    assert all(store.get_result(k) is not None for k in keys)

    gone = retention_pass(store, DAY, now=run.finished_at + DAY + 1)
    assert (gone.runs, gone.results) == (1, len(keys))
    with pytest.raises(NotFound):
        store.get_run(run.id)
    with pytest.raises(NotFound):
        store.run_spec(run.id)
    assert store.nodes(run.id) == [] and store.instances(run.id) == []
    assert store.events(run.id) == [] and run.id not in _listed(store)
    assert store.get_results(sorted(keys)) == {}


def test_a_run_with_limits_goes_with_the_output_counts_it_kept_beside_its_record(pool, store):
    scheduler, *_ = pool
    graph = _graph()
    graph.limits = RunLimits(items=10, images=10)
    run = _finished(store, scheduler.submit(graph).id)
    assert _counts(store, run.id) == {"spread": 3, "each": 3}

    assert retention_pass(store, DAY, now=run.finished_at + DAY + 1).runs == 1
    assert _counts(store, run.id) == {}


def test_a_resubmission_inside_the_window_reuses_results_and_after_it_recomputes(pool, store):
    scheduler, bodies, _ = pool
    first = _finished(store, scheduler.submit(_graph()).id)
    ran = bodies.count
    retention_pass(store, DAY, now=first.finished_at + DAY / 2)

    _finished(store, scheduler.submit(_graph()).id)
    assert bodies.count == ran  # every body's result was still there

    retention_pass(store, DAY, now=time.time() + WEEK + DAY)
    _finished(store, scheduler.submit(_graph()).id)
    assert bodies.count == 2 * ran


def test_a_result_stays_while_a_kept_run_references_it(pool, store):
    scheduler, *_ = pool
    short = _finished(store, scheduler.submit(_graph()).id)
    retention_pass(store, 10.0)  # the first run is kept 10 s
    long = _finished(store, scheduler.submit(_graph()).id)  # reuses every result
    retention_pass(store, 30 * DAY)  # the second is kept 30 days
    keys = _keys(store, long.id)

    retention_pass(store, DAY, now=long.finished_at + 2 * WEEK)  # past any reuse's extension
    with pytest.raises(NotFound):
        store.get_run(short.id)
    assert store.get_run(long.id).status == "succeeded"
    assert len(store.get_results(sorted(keys))) == len(keys)

    retention_pass(store, DAY, now=long.finished_at + 30 * DAY + 1)
    assert store.get_results(sorted(keys)) == {}


def test_a_pinned_run_and_its_results_stay_until_unpinned(pool, store):
    scheduler, *_ = pool
    run = _finished(store, scheduler.submit(_graph()).id)
    assert store.pin(run.id, True).pinned
    later = time.time() + 30 * DAY

    retention_pass(store, DAY, now=later)
    assert store.get_run(run.id).pinned and store.pinned_runs() == [run.id]
    keys = _keys(store, run.id)
    assert len(store.get_results(sorted(keys))) == len(keys)

    store.pin(run.id, False)
    gone = retention_pass(store, DAY, now=later)
    assert (gone.runs, gone.results) == (1, len(keys)) and store.pinned_runs() == []


def test_a_run_pinned_after_its_expiry_was_scheduled_stays(pool, store):
    scheduler, *_ = pool
    run = _finished(store, scheduler.submit(_graph()).id)
    retention_pass(store, DAY)  # scheduled to expire in a day
    store.pin(run.id, True)

    assert retention_pass(store, DAY, now=time.time() + 30 * DAY).runs == 0
    assert store.get_run(run.id).pinned


def test_an_expired_runs_idempotency_key_can_be_used_again(pool, store):
    scheduler, *_ = pool
    run = _finished(store, scheduler.submit(_graph(), idempotency_key="campaign-7").id)
    assert scheduler.submit(_graph(), idempotency_key="campaign-7").id == run.id

    retention_pass(store, DAY, now=time.time() + 2 * WEEK)
    again = scheduler.submit(_graph(), idempotency_key="campaign-7")
    assert again.id != run.id
    assert _finished(store, again.id).status == "succeeded"


def test_an_unfinished_run_is_never_expired(pool, store):
    scheduler, _, gate = pool
    g = Graph()
    g.add("hold", id="hold")
    run = scheduler.submit(g)

    assert retention_pass(store, DAY, now=time.time() + 30 * DAY).runs == 0
    assert not store.get_run(run.id).status.terminal
    gate.set()
    _finished(store, run.id)


def test_the_store_counts_what_it_holds(pool, store):
    scheduler, *_ = pool
    before = store.storage()
    run = _finished(store, scheduler.submit(_graph()).id)
    retention_pass(store, DAY)
    store.pin(run.id, True)

    after = store.storage()
    assert (after.runs, after.pinned) == (before.runs + 1, before.pinned + 1)
    assert after.results_expiring == before.results_expiring + len(_keys(store, run.id))
    assert after.bytes > 0
    retention_pass(store, DAY)  # the pin took the run off the expiry index
    assert store.storage().expiring == before.expiring
    # and once unpinned and expired, the run is counted no more: its listing entry went too
    store.pin(run.id, False)
    retention_pass(store, DAY, now=run.finished_at + DAY + 1)
    assert store.storage().runs == before.runs


def test_a_pass_takes_batch_after_batch_until_nothing_is_due(pool, store):
    scheduler, *_ = pool
    runs = [_finished(store, scheduler.submit(_graph(n)).id) for n in (1, 2, 3, 4, 5)]

    done = retention_pass(store, DAY, now=time.time() + 2 * WEEK, limit=2)
    assert (done.scheduled, done.runs) == (5, 5)
    assert not {r.id for r in runs} & _listed(store)


def test_a_run_that_asks_for_its_own_retention_is_kept_that_long_with_its_results(pool, store):
    # Given a run that asks to be kept 30 days, past the store's week for a result
    scheduler, *_ = pool
    graph = _graph()
    graph.retention = 30 * DAY
    run = _finished(store, scheduler.submit(graph).id)
    keys = _keys(store, run.id)

    # When passes that keep runs a day run before its 30 days are out
    assert retention_pass(store, DAY, now=run.finished_at + 30 * DAY - 1).runs == 0

    # Then it is kept with every result it names, and goes with them after
    assert store.get_run(run.id).status == "succeeded"
    assert len(store.get_results(sorted(keys))) == len(keys)
    gone = retention_pass(store, DAY, now=run.finished_at + 30 * DAY + 1)
    assert (gone.runs, gone.results) == (1, len(keys))


def test_a_runs_result_keys_are_what_its_instances_stored_or_read_and_its_nodes_output():
    insts = [InstanceRecord(run_id="r", instance_id="a#0", node_id="a", seq=0, result_key="k1",
                            inputs=[ItemRef(key="k0", index=0)]),
             InstanceRecord(run_id="r", instance_id="b#0", node_id="b", seq=0)]
    nodes = [NodeRecord(run_id="r", node_id="a", outputs=[ItemRef(key="k2", index=1)])]
    assert referenced_keys(insts, nodes) == {"k0", "k1", "k2"}
