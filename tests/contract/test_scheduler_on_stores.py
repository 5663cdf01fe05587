"""The scheduler and executor in this process on every store (StubBroker, real worker threads):
the scripted transitions (Redis scripts, SQLite statements) and the run transactions must drive
runs alike."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from types import SimpleNamespace

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from pydantic import BaseModel
from wait_util import until

from genloop.sdk import Graph, Loop
from genloop.sdk.errors import GraphError, NotFound, Permanent, StoreError, Transient
from genloop.sdk.graph import RunLimits
from genloop.sdk.models import NodeStatus
from genloop.workers import OpRegistry, default_registry, op
from genloop.workers.artifacts import LocalArtifactStore
from genloop.workers.pool.broker import wire
from genloop.workers.runtime import scheduler as scheduler_module
from genloop.workers.runtime.scheduler import Started, Succeeded
from genloop.workers.stores.records import InstanceRecord, ResultRecord


class N(BaseModel):
    n: int


def _counts(store, run_id: str) -> dict[str, int]:
    """The ended nodes' output counts the run keeps for its limits check."""
    with store.transaction(run_id) as tx:
        return tx.ended_counts()


def _stored_size(store, run_id: str) -> int:
    return len(store.get_run(run_id).model_dump_json())


def _wired(store, tmp_path, sweep_every: float = 0.2):
    registry = OpRegistry()
    op("spread", params=N, output=N, registry=registry)(
        lambda p, inputs, ctx: [N(n=i) for i in range(p.n)])
    op("double", output=N, registry=registry)(lambda p, inputs, ctx: N(n=2 * inputs[0].n))
    op("total", output=N, registry=registry)(lambda p, inputs, ctx: N(n=sum(i.n for i in inputs)))
    op("slow", params=N, output=N, registry=registry)(lambda p, inputs, ctx: time.sleep(p.n / 10)
                                                      or N(n=p.n))

    def bad(p, inputs, ctx):
        raise Permanent("this node fails")

    op("bad", output=N, registry=registry)(bad)
    broker = StubBroker()
    broker.emit_after("process_boot")
    return wire(broker, store, LocalArtifactStore(tmp_path / "art"), registry,
                queues=("cpu",), sweep_every=sweep_every, lease_ttl=30.0)


@contextmanager
def _working(wiring, threads: int = 4):
    """Worker threads taking ``wiring``'s messages until the block ends."""
    worker = dramatiq.Worker(wiring.broker, worker_threads=threads, worker_timeout=50)
    worker.start()
    try:
        yield
    finally:
        worker.stop()


@pytest.fixture
def pool(store, tmp_path):
    wiring = _wired(store, tmp_path)
    with _working(wiring):
        yield wiring


def _map_graph(n: int, each_op: str = "double") -> Graph:
    g = Graph()
    src = g.add("spread", id="spread", params={"n": n})
    each = g.add(each_op, id="each", inputs=[src], map=True)
    g.add("total", id="total", inputs=[each])
    return g


def _wait(store, run_id: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (run := store.get_run(run_id)).status.terminal:
        assert time.monotonic() < deadline, f"run still {run.status.value}"
        time.sleep(0.02)
    return run


def _until_the_outbox_drains(store) -> None:
    """A run's last transaction commits before its caller clears the marks it handled
    (``Scheduler.flush``): a reader can see the run ended with its last mark still there for a
    moment on a loaded machine."""
    until(lambda: store.outbox() == [], "the outbox to drain")


def _counting(monkeypatch, store, name: str) -> list[tuple]:
    """The arguments of each call of ``store.name`` from now on."""
    calls: list[tuple] = []
    real = getattr(store, name)
    monkeypatch.setattr(store, name, lambda *args: calls.append(args) or real(*args))
    return calls


def test_a_map_completes_with_every_item_counted_once(pool, store):
    run = pool.scheduler.submit(_map_graph(40))

    assert _wait(store, run.id).status == "succeeded"
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    (ref,) = nodes["total"].outputs
    assert store.get_result(ref.key).items == [{"n": 2 * sum(range(40))}]
    assert nodes["each"].pending_instances == 0 and len(nodes["each"].outputs) == 40
    events = store.events(run.id, limit=1000)
    assert sum(e.type == "instance.succeeded" for e in events) == 42
    assert [e.type for e in events].count("run.succeeded") == 1
    queued = [(e.node_id, e.status, e.message) for e in events if e.type == "node.queued"]
    assert ("each", "queued", "40 instance(s)") in queued
    assert ("spread", "queued", "1 instance(s)") in queued  # the root, queued at submit
    _until_the_outbox_drains(store)


def test_a_scheduler_keeps_the_graphs_of_its_512_newest_runs(store, tmp_path, monkeypatch):
    # Given a scheduler that submitted 513 runs
    wiring = _wired(store, tmp_path)
    runs = [wiring.scheduler.submit(_one("double")).id for _ in range(513)]
    reads = _counting(monkeypatch, store, "run_spec")
    # When it needs their graphs, Then only the oldest is read back
    for run_id in (runs[1], runs[-1], runs[0], runs[0]):
        assert list(wiring.scheduler.topology(run_id).nodes) == ["only"]
    assert reads == [(runs[0],)]


def test_a_failed_instance_is_told_with_its_status_attempt_and_error(pool, store):
    run = pool.scheduler.submit(_one("bad"))
    assert _wait(store, run.id).status == "failed"
    told = [(e.node_id, e.instance_id, e.status, e.attempt, e.error, e.message)
            for e in store.events(run.id) if e.type == "instance.failed"]
    assert told == [("only", "only", "failed", 1, "Permanent: this node fails", None)]


def test_an_empty_map_releases_each_waiting_child_past_one_already_skipped(store, tmp_path):
    # Given a pool with no sweeper to redo a lost release, and nodes held until the test lets
    # them end
    wiring = _wired(store, tmp_path, sweep_every=3600.0)
    gates = {"first": threading.Event(), "late": threading.Event()}

    def held(p, inputs, ctx):
        assert gates[ctx.node_id].wait(30)
        return N(n=p.n)

    op("held", params=N, output=N, registry=wiring.executor.registry)(held)
    # And a map that comes out empty once "first" ends. Its first child also needs "bad",
    # which fails; its second needs the map alone; its third the map and "late"
    g = Graph()
    bad = g.add("bad", id="bad")
    first = g.add("held", id="first", params={"n": 1})
    late = g.add("held", id="late", params={"n": 8})
    each = g.add("double", id="each", map=True,
                 inputs=[g.add("spread", id="spread", params={"n": 0}, inputs=[first])])
    g.add("total", id="skipped", inputs=[each, bad])
    g.add("total", id="alone", inputs=[each])
    g.add("total", id="waits", inputs=[each, late])

    def node(node_id: str):
        return next(n for n in store.nodes(run.id) if n.node_id == node_id)

    with _working(wiring):
        run = wiring.scheduler.submit(g)
        until(lambda: node("skipped").status == NodeStatus.SKIPPED, "the first child skipped")
        # When the map ends, Then it releases its second child past the skipped one, and its
        # third waits for "late" alone
        gates["first"].set()
        until(lambda: node("alone").status == NodeStatus.SUCCEEDED, "the second child run")
        waits = node("waits")
        assert (waits.status, waits.waiting) == (NodeStatus.PENDING, 1)
        gates["late"].set()
        assert _wait(store, run.id).status == "failed"
    totals = {node_id: store.get_result(node(node_id).outputs[0].key).items
              for node_id in ("alone", "waits")}
    assert totals == {"alone": [{"n": 0}], "waits": [{"n": 8}]}


def test_a_maps_chunks_complete_its_node_and_release_its_child_without_the_sweeper(store,
                                                                                 tmp_path):
    # Given a pool whose sweeper would not look for an hour: whatever a finished chunk leaves
    # undone (its node's completion, its child's release) would wait that long
    wiring = _wired(store, tmp_path, sweep_every=3600.0)
    with _working(wiring):
        # When a map of 40 items runs, Then it ends with its total, the chunks having done it all
        run = wiring.scheduler.submit(_map_graph(40))
        assert _wait(store, run.id).status == "succeeded"
        (ref,) = next(n for n in store.nodes(run.id) if n.node_id == "total").outputs
        assert store.get_result(ref.key).items == [{"n": 2 * sum(range(40))}]
        _until_the_outbox_drains(store)
        # and no chunk left its items' leases held for their time to run out
        keys = {i.result_key for i in store.instances(run.id) if i.node_id == "each"}
        assert len(keys) == 40 and all(store.claim(k, "someone", ttl=30) for k in keys)


def test_a_map_reads_its_parents_result_once_per_process(pool, store, monkeypatch):
    """Every item of a map takes one item of its parent's result; reading (and parsing) the
    whole result for each item made a big map quadratic. A stored result never changes, so a
    worker process reads it once, even when all its threads ask for it at the same moment."""
    reads = _counting(monkeypatch, store, "get_result")
    run = pool.scheduler.submit(_map_graph(40))

    assert _wait(store, run.id).status == "succeeded"
    spread = next(n for n in store.nodes(run.id) if n.node_id == "spread")
    assert reads.count((spread.outputs[0].key,)) == 1


def _chain(length: int, limits: bool = True) -> Graph:
    g = Graph(limits=RunLimits(items=100, images=100) if limits else None)
    node = g.add("spread", id="n0", params={"n": 1})
    for i in range(1, length):
        node = g.add("double", id=f"n{i}", inputs=[node])
    return g


def test_the_limits_check_reads_no_more_nodes_per_node_in_a_bigger_run(pool, store):
    """A graph with limits (every gateway run) re-plans each node that becomes ready with the
    real item counts of the nodes that ended; reading every node of the run for it made a run
    of N nodes read N^2. The counts are kept in the run, the scripted completions included."""
    reads: list[str] = []
    real = store.transaction

    @contextmanager
    def counted(run_id, **kwargs):
        with real(run_id, **kwargs) as tx:
            read = tx.node
            tx.node = lambda node_id: reads.append(node_id) or read(node_id)
            yield tx

    store.transaction = counted
    total, size = {}, {}
    for length in (4, 8, 16):
        reads.clear()
        run = pool.scheduler.submit(_chain(length))
        assert _wait(store, run.id).status == "succeeded"
        assert _counts(store, run.id) == {f"n{i}": 1 for i in range(length)}
        total[length], size[length] = len(reads), _stored_size(store, run.id)

    # Each node added reads as many nodes as those before it did.
    assert total[16] - total[8] <= 2 * (total[8] - total[4]), total
    # The run's record, which every completion rewrites, does not grow with its nodes
    assert max(size.values()) - min(size.values()) <= 4, size


def test_a_run_without_limits_keeps_no_item_counts_in_the_record_every_completion_rewrites(
        pool, store):
    run = pool.scheduler.submit(_chain(8, limits=False))
    ended = _wait(store, run.id)
    assert ended.status == "succeeded" and not ended.counts_ended
    assert _counts(store, run.id) == {}


def test_instances_this_process_sent_start_without_being_read_back(pool, store, monkeypatch):
    """The process that enqueued an instance hands its worker threads the record it sent, and
    keeps the graph of the run it submitted."""
    instances = _counting(monkeypatch, store, "instance")
    graphs = _counting(monkeypatch, store, "run_spec")
    run = pool.scheduler.submit(_map_graph(10))

    assert _wait(store, run.id).status == "succeeded"
    assert instances == [] and graphs == []


def test_another_process_reads_a_runs_graph_once_for_all_its_threads(store, tmp_path,
                                                                      monkeypatch):
    run = _wired(store, tmp_path).scheduler.submit(_map_graph(3))
    # Given a store slow to answer for a graph, so that the threads overlap while one reads it
    read = store.run_spec
    reads: list[str] = []

    def slow_read(run_id: str):
        reads.append(run_id)
        time.sleep(0.05)
        return read(run_id)

    monkeypatch.setattr(store, "run_spec", slow_read)
    other = _wired(store, tmp_path).scheduler
    start, topologies = threading.Barrier(8, timeout=10), []

    def ask() -> None:
        start.wait()
        topologies.append(other.topology(run.id))

    # When eight threads of another process ask for the graph at once
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    # Then it is read once, and each thread has the same one
    assert not any(t.is_alive() for t in threads) and len(topologies) == 8
    assert reads == [run.id] and len({id(t) for t in topologies}) == 1
    assert set(topologies[0].nodes) == {"spread", "each", "total"}
    # (white box) and the lock that made them wait went with the read: none is kept per run
    assert run.id not in other._loading


def test_the_last_node_succeeding_after_another_failed_ends_the_run_failed(pool, store):
    """The script that completes the last node must not end the run as succeeded when an
    earlier node failed (it leaves that ending to the run transaction)."""
    g = Graph()
    g.add("bad", id="bad")
    g.add("slow", id="last", params={"n": 3})
    run = pool.scheduler.submit(g)

    ended = _wait(store, run.id)
    assert ended.status == "failed" and "this node fails" in ended.error
    nodes = {n.node_id: n.status for n in store.nodes(run.id)}
    assert nodes == {"bad": "failed", "last": "succeeded"}
    events = store.events(run.id)
    assert [e.type for e in events].count("run.failed") == 1
    # And "last" is told as made, not as found stored
    (done,) = [e for e in events if e.type == "instance.succeeded" and e.node_id == "last"]
    assert done.message == "1 item(s)"


def test_node_transitions_left_by_a_crash_are_finished_by_the_sweeper(pool, store):
    """The scripted steps (Redis scripts, SQLite's few statements) leave two kinds of step to
    a run transaction: expanding a child they released, and completing a node of many
    instances. A worker that dies before either (every first attempt here) leaves an outbox
    mark, and the sweeper finishes the step from it."""
    scheduler, real, calls, crashed = pool.scheduler, pool.scheduler.finish_node, {}, []

    def crash_every_other(run_id, node_id):
        calls[node_id] = calls.get(node_id, 0) + 1
        if calls[node_id] % 2:
            crashed.append(node_id)
            raise RuntimeError("worker died before the node's transition")
        real(run_id, node_id)

    scheduler.finish_node = crash_every_other
    run = scheduler.submit(_map_graph(3))

    assert _wait(store, run.id).status == "succeeded"
    # each: expanded after the script completed spread (crash, sweep), then completed with
    # total expanded in the same transaction (crash, sweep); the script completes total.
    assert crashed == ["each", "each"]
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert store.get_result(nodes["total"].outputs[0].key).items == [{"n": 6}]
    _until_the_outbox_drains(store)


def _counted(pool, name: str, **options) -> list[float]:
    """Register op ``name`` on the pool's registry; the list returned gets the time of each run
    of its body."""
    calls: list[float] = []
    op(name, output=N, registry=pool.executor.registry, **options)(
        lambda p, inputs, ctx: calls.append(time.monotonic()) or N(n=len(calls)))
    return calls


def _result(n: int, key: str = "k") -> ResultRecord:
    """A result of the ``double`` op, as an execution would store it under ``key``."""
    return ResultRecord(key=key, op="double", items=[{"n": n}], created_at=time.time())


def _started(wiring, owner: str, ttl: float = 30) -> tuple:
    """A run of one ``double`` node, submitted with no worker, and its instance started under
    ``owner``'s lease on key ``k`` (the executor's part taken by the test): (run, instance)."""
    run = wiring.scheduler.submit(_one("double"))
    inst = wiring.scheduler.store.instance(run.id, "only")
    assert wiring.scheduler.claim_and_start(inst, 1, "k", owner, ttl=ttl)[0] == Started.STARTED
    return run, inst


def _one(op_name: str) -> Graph:
    g = Graph()
    g.add(op_name, id="only")
    return g


def test_a_stored_result_is_reused_under_the_same_model_and_not_under_another(pool, store):
    # Given an op whose result depends on the model the worker serves
    served = {"model": "model-a"}
    calls = _counted(pool, "modelled", identity=lambda params, resources: served["model"])
    assert _wait(store, pool.scheduler.submit(_one("modelled")).id).status == "succeeded"
    # When the same graph runs again on the same model, Then its stored result is reused
    again = pool.scheduler.submit(_one("modelled"))
    assert _wait(store, again.id).status == "succeeded"
    assert len(calls) == 1
    assert [e.message for e in store.events(again.id) if e.type == "instance.succeeded"] == [
        "1 item(s), cached"]
    # When the worker serves another model, Then the same graph runs the body again
    served["model"] = "model-b"
    assert _wait(store, pool.scheduler.submit(_one("modelled")).id).status == "succeeded"
    assert len(calls) == 2


def _overtaken(wiring) -> tuple:
    """Two runs of one graph, whose instance shares result key ``k``, with no worker: the first
    execution's lease runs out before it finishes, so a second one starts too, and then the
    first stores its result (``n=1``). (first run, second run, the second's instance)."""
    first, first_inst = _started(wiring, "slow", ttl=0.05)
    until(lambda: not wiring.scheduler.store.lease_remaining("k"), "the lease on k ran out")
    second, second_inst = _started(wiring, "late")
    wiring.scheduler.succeeded(first.id, "only", _result(1), lease=("k", "slow"),
                               started=first_inst)
    return first, second, second_inst


@pytest.mark.parametrize("second_in", ["its own step", "a chunk's step"])
def test_a_second_execution_whose_lease_ran_out_completes_with_the_result_stored_first(
        store, tmp_path, second_in):
    # Given a second execution started when the first's lease ran out, and the first's result
    # stored
    wiring = _wired(store, tmp_path)
    first, second, second_inst = _overtaken(wiring)
    # When the second finishes with another (alone, or as a chunk's instance)
    if second_in == "its own step":
        wiring.scheduler.succeeded(second.id, "only", _result(2), lease=("k", "late"),
                                   started=second_inst)
    else:
        wiring.scheduler.succeeded_many([Succeeded(second_inst, _result(2), ("k", "late"))])
    # Then both runs end with the result stored first, the second saying it reused it
    for run in (first, second):
        assert store.get_run(run.id).status == "succeeded"
        (ref,) = store.nodes(run.id)[0].outputs
        assert store.get_result(ref.key).items == [{"n": 1}]
    assert [e.message for e in store.events(second.id) if e.type == "instance.succeeded"] == [
        "1 item(s), cached"]


def test_a_late_execution_whose_first_result_was_deleted_under_it_lands_its_own_or_says_why(
        store, tmp_path, monkeypatch):
    # Given a second execution that finishes after the first stored the result, and retention
    # deleting that result between the finish step and its read (once)
    wiring = _wired(store, tmp_path)
    first, second, second_inst = _overtaken(wiring)
    real, deletions = store.finish_instances, []

    def finish_instances(finishes):
        outs = real(finishes)
        if not deletions:  # the retention pass: the first run expires, and its result with it
            store.schedule_expiry(first.id, time.time(), ["k"])
            deletions.append(store.delete_results(["k"], now=time.time()))
        return outs

    monkeypatch.setattr(store, "finish_instances", finish_instances)
    # When the scheduler has no patience to try again, Then the error names what is gone
    wiring.scheduler.complete_patience = 0.0
    with pytest.raises(StoreError) as gone:
        wiring.scheduler.succeeded(second.id, "only", _result(2), lease=("k", "late"),
                                   started=second_inst)
    assert deletions == [1]
    assert str(gone.value) == (f"the result 'k' stored first for instance "
                               f"{second_inst.instance_id!r} of run {second.id!r} is gone")
    # When it tries again, Then the late execution lands its own result
    wiring.scheduler.succeeded(second.id, "only", _result(2), lease=("k", "late"),
                               started=second_inst)
    assert store.get_run(second.id).status == "succeeded"
    (ref,) = store.nodes(second.id)[0].outputs
    assert store.get_result(ref.key).items == [{"n": 2}]


def test_a_retry_recorded_after_the_next_attempt_started_leaves_that_attempt_running(
        store, tmp_path):
    # Given attempt 2 started: Retries re-sent attempt 1's message before its failure was
    # recorded
    wiring = _wired(store, tmp_path)
    run = wiring.scheduler.submit(_one("double"))
    inst = store.instance(run.id, "only")
    assert wiring.scheduler.claim_and_start(inst, 2, "k", "second", ttl=30)[0] == Started.STARTED
    # When attempt 1's retry is recorded, Then attempt 2 stays running, and the retry is told
    wiring.scheduler.retrying(run.id, "only", 1, Transient("boom"))
    assert store.instance(run.id, "only").status == NodeStatus.RUNNING
    assert [(e.type, e.attempt) for e in store.events(run.id) if e.type.startswith("instance")
            ] == [("instance.started", 2), ("instance.retry", 1)]


def test_a_started_run_keeps_its_labels_and_a_loop_apart_from_the_graph_it_runs(pool, store):
    # Given a loop admitted elsewhere and the graph it was compiled to (any graph: start checks
    # nothing again), labelled
    loop = Loop(prompt="a red circle", labels={"campaign": "spring"})
    graph = Graph()
    graph.add("spread", id="only", params={"n": 2})
    # When the scheduler starts it
    run = pool.scheduler.start(loop, graph)
    # Then the run keeps the labels, and the store the loop as submitted and the graph it runs
    assert _wait(store, run.id).status == "succeeded"
    assert store.get_run(run.id).labels == {"campaign": "spring"}
    submitted = store.run_spec(run.id)
    assert submitted.spec == loop.model_dump(mode="json")
    assert submitted.graph == graph.model_dump(mode="json")


def test_a_start_marks_the_instance_running_under_its_key_and_says_so_once(store, tmp_path):
    wiring = _wired(store, tmp_path)
    g = Graph()
    g.add("double", id="a")
    g.add("double", id="b")
    run = wiring.scheduler.submit(g)
    for node_id, key in (("a", "ka"), ("b", "kb")):
        inst = store.instance(run.id, node_id)
        assert wiring.scheduler.claim_and_start(inst, 2, key, "me", ttl=30)[0] == Started.STARTED
        started = store.instance(run.id, node_id)
        assert (started.status, started.attempts, started.result_key) == (
            NodeStatus.RUNNING, 2, key)
    told = [(e.type, e.node_id, e.instance_id, e.attempt, e.status)
            for e in store.events(run.id) if e.type in ("run.running", "instance.started")]
    assert told == [("instance.started", "a", "a", 2, "running"),
                    ("run.running", None, None, None, "running"),
                    ("instance.started", "b", "b", 2, "running")]


class _Clock:
    """The scheduler's monotonic clock and sleep, advanced by its sleeps alone: retry gaps are
    read exactly, with no wall time spent."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_completion_is_retried_through_a_store_outage_within_its_patience(
        store, tmp_path, monkeypatch):
    # Given a started instance, and a store whose completion step fails while an outage lasts
    wiring = _wired(store, tmp_path)
    wiring.scheduler.complete_patience = 30.0
    run, inst = _started(wiring, "me")
    real, outage = store.finish_instances, {"failures": 2}

    def finish_instances(finishes):
        outage["failures"] -= 1
        if outage["failures"] >= 0:
            raise StoreError("redis: connection lost")
        return real(finishes)

    monkeypatch.setattr(store, "finish_instances", finish_instances)
    clock = _Clock()
    monkeypatch.setattr(scheduler_module, "time", SimpleNamespace(
        monotonic=clock.monotonic, sleep=clock.sleep, time=time.time))
    result = _result(1)
    # When the outage ends after two tries, Then the third lands it, after waits of 0.1 s
    # and 0.2 s
    wiring.scheduler.succeeded(run.id, "only", result, lease=("k", "me"), started=inst)
    assert store.get_run(run.id).status == "succeeded"
    assert clock.sleeps == [0.1, 0.2]
    # When an outage outlasts the patience (30 s), Then the tries back off, doubling up to 2 s
    # apart, and the error comes out when the next try would come after the patience
    clock.sleeps.clear()
    outage["failures"] = 1_000
    with pytest.raises(StoreError, match="connection lost"):
        wiring.scheduler.succeeded(run.id, "only", result, lease=("k", "me"), started=inst)
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6] + [2.0] * 13)


def test_a_start_or_completion_of_an_instance_the_store_does_not_hold_names_it(store, tmp_path):
    wiring = _wired(store, tmp_path)
    run = wiring.scheduler.submit(_one("double"))
    ghost = InstanceRecord(run_id=run.id, instance_id="ghost", node_id="only", seq=1)
    with pytest.raises(NotFound, match=f"^no instance 'ghost' in run '{run.id}'$"):
        wiring.scheduler.claim_and_start(ghost, 1, "k", "me", ttl=30)
    with pytest.raises(NotFound, match=f"^no instance 'ghost' in run '{run.id}'$"):
        wiring.scheduler.succeeded(run.id, "ghost", _result(1), started=ghost)


def test_bumping_an_ops_version_runs_its_body_again(pool, store):
    # Given a graph whose result is stored under version 1 of its op
    calls = _counted(pool, "versioned", version="1")
    assert _wait(store, pool.scheduler.submit(_one("versioned")).id).status == "succeeded"
    assert _wait(store, pool.scheduler.submit(_one("versioned")).id).status == "succeeded"
    assert len(calls) == 1
    # When the op's version is bumped (its output changed for the same inputs)
    registry = pool.executor.registry
    registry.register(replace(registry["versioned"], version="2"))
    # Then the same graph runs the body again rather than reuse the old version's result
    assert _wait(store, pool.scheduler.submit(_one("versioned")).id).status == "succeeded"
    assert len(calls) == 2


def test_retries_wait_at_least_the_ops_min_backoff_doubling(pool, store):
    # Given an op that fails twice before it succeeds, with a 0.2 s minimum backoff
    min_backoff, attempts = 0.2, []

    def flaky(p, inputs, ctx):
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RuntimeError("a transient failure")
        return N(n=len(attempts))

    op("flaky", output=N, max_retries=2, min_backoff=min_backoff, max_backoff=2.0,
       registry=pool.executor.registry)(flaky)
    # When it runs
    run = pool.scheduler.submit(_one("flaky"))
    assert _wait(store, run.id).status == "succeeded"
    # Then retry i came no sooner than min_backoff * 2**i after the attempt before it (the
    # backoff's floor: Dramatiq's jitter only lengthens it)
    gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert len(gaps) == 2
    assert all(gap >= min_backoff * 2**i for i, gap in enumerate(gaps)), gaps
    # and each retry was told with its instance, its attempt and the error that caused it
    (inst,) = store.instances(run.id)
    retries = [(e.instance_id, e.attempt, e.error) for e in store.events(run.id)
               if e.type == "instance.retry"]
    assert retries == [(inst.instance_id, n, "RuntimeError: a transient failure") for n in (1, 2)]


def test_cancel_ends_every_instance_that_has_not_started(store, tmp_path):
    # Given a run whose instances are all queued (no worker has taken them yet)
    wiring = _wired(store, tmp_path)
    run = wiring.scheduler.submit(_map_graph(3))
    roots = store.instances(run.id)
    assert [i.status for i in roots] == [NodeStatus.QUEUED]

    # When it is cancelled
    wiring.scheduler.cancel(run.id)

    # Then the run has ended, and so has every instance: none is left queued for a delivery
    # to find (and start) later, and every node is cancelled
    assert store.get_run(run.id).status == "cancelled"
    assert [i.status for i in store.instances(run.id)] == [NodeStatus.CANCELLED]
    assert {n.status for n in store.nodes(run.id)} == {NodeStatus.CANCELLED}


def test_a_failed_node_skips_every_descendant_and_the_run_ends_with_none_pending(pool, store):
    """Everything downstream of a failed node is skipped, each with its event, counted as ended
    (items for the limits check, the run's pending nodes), so the run ends failed at once."""
    g = Graph(limits=RunLimits(items=100, images=100))
    g.add("spread", id="aside", params={"n": 1})  # ends first: the skips leave nothing pending
    late = g.add("slow", id="late", params={"n": 2})
    bad = g.add("bad", id="bad", inputs=[late])
    child = g.add("double", id="child", inputs=[bad])
    g.add("total", id="grandchild", inputs=[child])
    run = pool.scheduler.submit(g)

    ended = _wait(store, run.id, timeout=10.0)
    assert ended.status == "failed" and ended.pending_nodes == 0
    assert {n.node_id: n.status for n in store.nodes(run.id)} == {
        "aside": "succeeded", "late": "succeeded", "bad": "failed", "child": "skipped",
        "grandchild": "skipped"}
    assert _counts(store, run.id) == {"aside": 1, "late": 1, "bad": 0, "child": 0,
                                      "grandchild": 0}
    events = store.events(run.id)
    skipped = sorted((e.node_id, e.status, e.message) for e in events if e.type == "node.skipped")
    assert skipped == [("child", "skipped", "input bad failed"),
                       ("grandchild", "skipped", "input bad failed")]
    (last,) = [e for e in events if e.type == "run.failed"]
    assert last.status == "failed" and "this node fails" in last.error


def test_cancel_ends_what_has_not_started_once_and_the_run_when_its_running_work_ends(
        pool, store):
    # Given a run whose first node has ended, whose second is running and whose third waits
    g = Graph(limits=RunLimits(items=100, images=100))
    g.add("spread", id="done", params={"n": 1})
    running = g.add("slow", id="running", params={"n": 10})
    g.add("double", id="waiting", inputs=[running])
    run = pool.scheduler.submit(g)
    until(lambda: {(i.node_id, i.status) for i in store.instances(run.id)} >= {
        ("done", NodeStatus.SUCCEEDED), ("running", NodeStatus.RUNNING)},
        "the first node ended and the second running")

    # When it is cancelled, twice
    pool.scheduler.cancel(run.id)
    pool.scheduler.cancel(run.id)

    # Then the waiting node is cancelled at once, the running one ends with its work, and the
    # run ends cancelled with nothing pending; each is told once
    ended = _wait(store, run.id, timeout=10.0)
    assert ended.status == "cancelled" and ended.pending_nodes == 0
    assert {n.node_id: n.status for n in store.nodes(run.id)} == {
        "done": "succeeded", "running": "cancelled", "waiting": "cancelled"}
    assert _counts(store, run.id) == {"done": 1, "running": 1, "waiting": 0}
    told = [(e.type, e.node_id, e.status) for e in store.events(run.id)
            if e.type in ("run.cancelling", "node.cancelled", "run.cancelled")]
    assert told == [("run.cancelling", None, "cancelling"),
                    ("node.cancelled", "waiting", "cancelled"),
                    ("node.cancelled", "running", "cancelled"),
                    ("run.cancelled", None, "cancelled")]


def test_a_map_fed_past_the_runs_item_limit_fails_when_it_comes_and_runs_nothing_downstream(
        pool, store):
    """Limits are planned at submit from what each op promises; an op that returns more items
    than planned is caught when its child becomes ready, from the real counts of the nodes that
    ended: the child fails with the figures instead of expanding, and its descendants skip."""
    g = Graph(limits=RunLimits(items=8, images=100))
    src = g.add("spread", id="src", params={"n": 40})  # planned as one item
    each = g.add("double", id="each", inputs=[src], map=True)
    g.add("total", id="total", inputs=[each])
    run = pool.scheduler.submit(g)

    ended = _wait(store, run.id)
    problem = "40 input items; at most 8 per node (an op upstream returned more items than planned)"
    assert ended.status == "failed" and ended.pending_nodes == 0
    assert ended.error == f"node each: LimitExceeded: {problem}"
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert {nid: n.status for nid, n in nodes.items()} == {
        "src": "succeeded", "each": "failed", "total": "skipped"}
    assert nodes["each"].error == f"LimitExceeded: {problem}" and nodes["each"].outputs == []
    assert [i.node_id for i in store.instances(run.id)] == ["src"]  # each never expanded
    assert _counts(store, run.id) == {"src": 40, "each": 0, "total": 0}
    events = [(e.type, e.node_id, e.status, e.error, e.message) for e in store.events(run.id)
              if e.type.startswith(("node.", "run."))]
    assert events[-3:] == [
        ("node.failed", "each", "failed", f"LimitExceeded: {problem}", None),
        ("node.skipped", "total", "skipped", None, "input each failed"),
        ("run.failed", None, "failed", f"node each: LimitExceeded: {problem}", None)]
    _until_the_outbox_drains(store)


def test_a_map_fed_within_the_runs_limits_expands_on_the_real_counts(pool, store):
    # Given the same graph whose source returns 8 items, at the limit
    g = Graph(limits=RunLimits(items=8, images=100))
    src = g.add("spread", id="src", params={"n": 8})
    each = g.add("double", id="each", inputs=[src], map=True)
    g.add("total", id="total", inputs=[each])
    run = pool.scheduler.submit(g)

    # Then the map expands into one instance per item and the run succeeds
    assert _wait(store, run.id).status == "succeeded"
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert len(nodes["each"].outputs) == 8
    assert store.get_result(nodes["total"].outputs[0].key).items == [{"n": 2 * sum(range(8))}]
    assert _counts(store, run.id) == {"src": 8, "each": 8, "total": 1}


def test_a_second_failure_skips_the_descendants_the_first_left_even_past_one_it_skipped(
        pool, store):
    # Given two failing nodes: "first" fails at once, "second" after its slow parent; "shared"
    # hangs below both, "own" below the second alone (listed first, so "shared" is met first
    # when the second failure walks its descendants)
    g = Graph(limits=RunLimits(items=100, images=100))
    first = g.add("bad", id="first")
    second = g.add("bad", id="second", inputs=[g.add("slow", id="late", params={"n": 2})])
    g.add("double", id="own", inputs=[second])
    g.add("total", id="shared", inputs=[first, second])
    run = pool.scheduler.submit(g)

    # Then the first failure skips "shared", the second skips "own" past it, and the run ends
    ended = _wait(store, run.id, timeout=10.0)
    assert ended.status == "failed" and ended.pending_nodes == 0
    assert {n.node_id: n.status for n in store.nodes(run.id)} == {
        "first": "failed", "late": "succeeded", "second": "failed", "own": "skipped",
        "shared": "skipped"}
    skipped = [(e.node_id, e.message) for e in store.events(run.id) if e.type == "node.skipped"]
    assert skipped == [("shared", "input first failed"), ("own", "input second failed")]


def _cancelled_while_running(pool, store, body) -> tuple[str, list[int]]:
    """Run op ``body(ctx, attempt)`` as the only node of a run, cancel the run while its first
    attempt runs, and wait for the run to end; returns the run's id and the attempts made."""
    attempts: list[int] = []

    def run(p, inputs, ctx):
        attempts.append(len(attempts) + 1)
        return body(ctx, len(attempts))

    op("watch", output=N, registry=pool.executor.registry, max_retries=3, min_backoff=0.05)(run)
    run_record = pool.scheduler.submit(_one("watch"))
    until(lambda: attempts, "the first attempt running")
    pool.scheduler.cancel(run_record.id)
    assert _wait(store, run_record.id, timeout=10.0).status == "cancelled"
    return run_record.id, attempts


def test_a_running_op_that_sees_the_cancel_ends_its_instance_node_and_run_cancelled(
        pool, store):
    def until_cancelled(ctx, attempt):
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            ctx.check_cancelled()
            time.sleep(0.01)
        return N(n=attempt)

    run_id, attempts = _cancelled_while_running(pool, store, until_cancelled)

    assert attempts == [1]  # a cancelled attempt is not retried
    (inst,) = store.instances(run_id)
    assert inst.status == "cancelled" and inst.failure is None
    assert [n.status for n in store.nodes(run_id)] == ["cancelled"]
    told = [(e.type, e.node_id, e.instance_id) for e in store.events(run_id)
            if e.type.endswith("cancelled")]
    assert told == [("instance.cancelled", "only", inst.instance_id),
                    ("node.cancelled", "only", None), ("run.cancelled", None, None)]


def test_a_retry_due_in_a_cancelling_run_does_not_run(pool, store):
    # Given an attempt that fails retryably once its run is cancelled
    def fail_once_cancelled(ctx, attempt):
        until(lambda: store.get_run(ctx.run_id).cancel_requested, "the run cancelled")
        raise Transient("a retryable failure")

    # When its retry comes due, then it ends the instance cancelled instead of running
    run_id, attempts = _cancelled_while_running(pool, store, fail_once_cancelled)
    assert attempts == [1]
    (inst,) = store.instances(run_id)
    assert inst.status == "cancelled" and inst.attempts == 1
    types = [e.type for e in store.events(run_id)]
    assert types.count("instance.retry") == 1 and types.count("instance.started") == 1
    assert types[-3:] == ["instance.cancelled", "node.cancelled", "run.cancelled"]
    _until_the_outbox_drains(store)


def test_resume_sends_again_what_a_lost_message_left_and_leaves_an_ended_run_alone(
        store, tmp_path):
    # Given a run whose messages were lost before any worker took them
    wiring = _wired(store, tmp_path)
    run = wiring.scheduler.submit(_map_graph(3))
    wiring.broker.flush_all()
    with _working(wiring, threads=2):
        # When it is resumed, then its pending instance is sent again and the run completes
        resumed = wiring.scheduler.resume(run.id)
        assert resumed.id == run.id and not resumed.status.terminal
        ended = _wait(store, run.id)
        assert ended.status == "succeeded"
        nodes = {n.node_id: n for n in store.nodes(run.id)}
        assert store.get_result(nodes["total"].outputs[0].key).items == [{"n": 6}]
        (told,) = [e for e in store.events(run.id, limit=1000) if e.type == "run.resumed"]
        assert told.message == "1 instance(s)"
        # And resuming the ended run changes and sends nothing
        before = store.events(run.id, limit=1000)
        assert wiring.scheduler.resume(run.id).status == "succeeded"
        assert store.events(run.id, limit=1000) == before


def test_a_node_whose_inputs_miss_its_quorum_fails_with_the_count_and_the_failures(pool, store):
    # Given a map of 3 items where the items 1 and 2 fail, feeding a node that needs 2 of them
    def odd(p, inputs, ctx):
        if inputs[0].n:
            raise Permanent(f"item {inputs[0].n} fails")
        return N(n=0)

    op("zero-only", output=N, registry=pool.executor.registry)(odd)
    g = Graph()
    each = g.add("zero-only", id="each", map=True,
                 inputs=[g.add("spread", id="src", params={"n": 3})])
    g.add("total", id="total", inputs=[each], min_success=2)
    run = pool.scheduler.submit(g)

    # Then that node fails, naming the count and each failed item, and so does the run
    ended = _wait(store, run.id)
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert {nid: n.status for nid, n in nodes.items()} == {
        "src": "succeeded", "each": "succeeded", "total": "failed"}
    failures = nodes["each"].failures
    assert sorted(f.message for f in failures) == ["item 1 fails", "item 2 fails"]
    assert nodes["total"].error == (
        "QuorumError: 1 of 3 input items succeeded, min_success=2. Failed: "
        + "; ".join(f"{f.instance_id}: Permanent: {f.message}" for f in failures))
    assert ended.status == "failed" and ended.error == f"node total: {nodes['total'].error}"
    assert [i.node_id for i in store.instances(run.id)].count("total") == 0
    (told,) = [e for e in store.events(run.id) if e.type == "node.failed"]
    assert told.node_id == "total" and told.error == nodes["total"].error


def test_a_run_stored_before_ended_counts_were_kept_checks_its_limits_from_its_nodes(
        pool, store):
    # Given a run with limits whose record keeps no ended counts (as one stored by an older
    # version), its source still running
    g = Graph(limits=RunLimits(items=8, images=100))
    src = g.add("slow", id="src", params={"n": 10})  # ends well after the record is rewritten
    each = g.add("double", id="each", inputs=[g.add("spread", id="many", params={"n": 40},
                                                    inputs=[src])], map=True)
    g.add("total", id="total", inputs=[each])
    run = pool.scheduler.submit(g)
    with store.transaction(run.id) as tx:
        old = tx.run()
        old.counts_ended = False
        tx.put_run(old)

    # Then the map fed 40 items still fails its limit, read from the ended nodes
    ended = _wait(store, run.id)
    assert ended.status == "failed" and not ended.counts_ended
    assert ended.error == ("node each: LimitExceeded: 40 input items; at most 8 per node (an op "
                           "upstream returned more items than planned)")
    assert _counts(store, run.id) == {}


def test_a_map_over_no_items_succeeds_with_none_and_its_child_runs_on_nothing(pool, store):
    run = pool.scheduler.submit(_map_graph(0))

    assert _wait(store, run.id).status == "succeeded"
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert nodes["each"].status == "succeeded" and nodes["each"].outputs == []
    assert [i.node_id for i in store.instances(run.id)] == ["spread", "total"]
    assert store.get_result(nodes["total"].outputs[0].key).items == [{"n": 0}]
    told = [(e.type, e.status) for e in store.events(run.id) if e.node_id == "each"]
    assert told == [("node.succeeded", "succeeded")]


def test_a_node_mark_that_comes_early_changes_nothing(store, tmp_path):
    # Given a run of a map and its total, nothing taken by a worker yet
    wiring = _wired(store, tmp_path)
    run = wiring.scheduler.submit(_map_graph(3))

    # When the marks' transition is asked of a node still queued, and of nodes still waiting
    # on their parents (a stale mark, or a sweeper's early one)
    for node_id in ("spread", "each", "total"):
        wiring.scheduler.finish_node(run.id, node_id)

    # Then nothing moved: the root still queued with its one instance, the rest pending
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert [(nodes[n].status, nodes[n].pending_instances) for n in ("spread", "each", "total")] \
        == [(NodeStatus.QUEUED, 1), (NodeStatus.PENDING, 0), (NodeStatus.PENDING, 0)]
    assert [i.node_id for i in store.instances(run.id)] == ["spread"]
    assert store.get_run(run.id).status == "pending"


def test_a_failure_after_its_retries_counts_every_attempt(pool, store):
    def broken(p, inputs, ctx):
        raise RuntimeError("never works")

    op("broken", output=N, max_retries=1, min_backoff=0.01, max_backoff=0.02,
       registry=pool.executor.registry)(broken)
    run = pool.scheduler.submit(_one("broken"))
    assert _wait(store, run.id).status == "failed"
    (failure,) = store.nodes(run.id)[0].failures
    assert (failure.error_type, failure.message, failure.attempts) == \
        ("RuntimeError", "never works", 2)


def test_an_elementwise_failure_counts_every_item_it_lost(pool, store):
    def broken(p, inputs, ctx):
        raise Permanent("none of them")

    op("broken-each", output=N, elementwise=True, registry=pool.executor.registry)(broken)
    g = Graph()
    g.add("broken-each", id="each", inputs=[g.add("spread", id="src", params={"n": 3})])
    run = pool.scheduler.submit(g)
    assert _wait(store, run.id).status == "failed"
    (failure,) = next(n for n in store.nodes(run.id) if n.node_id == "each").failures
    assert (failure.instance_id, failure.message, failure.items) == ("each", "none of them", 3)


def test_a_child_released_by_a_failed_item_is_sent_at_once(store, tmp_path):
    # Given a pool whose sweeper would not look for an hour, and a map of 3 whose item 1 fails
    # last (after the others succeeded), feeding a node that needs 2 of them
    wiring = _wired(store, tmp_path, sweep_every=3600.0)

    def late_failure(p, inputs, ctx):
        if inputs[0].n == 1:
            time.sleep(0.3)
            raise Permanent("item 1 fails")
        return N(n=inputs[0].n)

    op("late-failure", output=N, registry=wiring.executor.registry)(late_failure)
    g = Graph()
    each = g.add("late-failure", id="each", map=True,
                 inputs=[g.add("spread", id="src", params={"n": 3})])
    g.add("total", id="total", inputs=[each], min_success=2)
    with _working(wiring):
        # When it runs, Then the failure's completion sends the child it released: the run ends
        run = wiring.scheduler.submit(g)
        assert _wait(store, run.id, timeout=10).status == "succeeded"
        total = next(n for n in store.nodes(run.id) if n.node_id == "total")
        assert store.get_result(total.outputs[0].key).items == [{"n": 2}]
        _until_the_outbox_drains(store)


def test_a_node_of_one_instance_and_its_run_say_they_succeeded(pool, store):
    g = Graph()
    g.add("total", id="total", inputs=[g.add("spread", id="src", params={"n": 2})])
    run = pool.scheduler.submit(g)
    assert _wait(store, run.id).status == "succeeded"
    told = [(e.type, e.node_id, e.status) for e in store.events(run.id)
            if e.type in ("node.succeeded", "run.succeeded")]
    assert told == [("node.succeeded", "src", "succeeded"), ("node.succeeded", "total",
                    "succeeded"), ("run.succeeded", None, "succeeded")]


def test_a_node_of_one_instance_that_halts_skips_its_child(pool, store):
    def halts(p, inputs, ctx):
        ctx.halt()
        return N(n=1)

    op("halts", output=N, registry=pool.executor.registry)(halts)
    g = Graph()
    g.add("double", id="child", inputs=[g.add("halts", id="only")])
    run = pool.scheduler.submit(g)
    assert _wait(store, run.id).status == "succeeded"
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert nodes["only"].halted and nodes["only"].status == NodeStatus.SUCCEEDED
    assert (nodes["child"].status, nodes["child"].error) == (NodeStatus.SKIPPED,
                                                             "halted upstream")


def test_one_item_of_a_map_that_halts_skips_everything_downstream(pool, store):
    def halts_on_one(p, inputs, ctx):
        if inputs[0].n == 1:
            ctx.halt()
        return N(n=inputs[0].n)

    op("halts-on-one", output=N, registry=pool.executor.registry)(halts_on_one)
    run = pool.scheduler.submit(_map_graph(3, each_op="halts-on-one"))
    assert _wait(store, run.id).status == "succeeded"
    nodes = {n.node_id: n for n in store.nodes(run.id)}
    assert nodes["each"].halted and len(nodes["each"].outputs) == 3
    assert (nodes["total"].status, nodes["total"].error) == (NodeStatus.SKIPPED, "halted upstream")
    told = {(e.type, e.node_id): e.message for e in store.events(run.id)}
    assert told[("node.succeeded", "each")] == "halted: later rounds skipped"
    assert told[("node.skipped", "total")] == "halted upstream"


def test_a_cancelled_map_ends_only_when_its_last_running_item_ends(pool, store):
    # Given a map of three items, each running and held on a gate of its own
    gates = [threading.Event() for _ in range(3)]
    op("held", output=N, registry=pool.executor.registry)(
        lambda p, inputs, ctx: gates[inputs[0].n].wait(30) and N(n=inputs[0].n))
    g = Graph()
    g.add("held", id="each", inputs=[g.add("spread", id="spread", params={"n": 3})], map=True)
    run = pool.scheduler.submit(g)

    def running() -> list[str]:
        return [i.instance_id for i in store.instances(run.id)
                if i.node_id == "each" and i.status == NodeStatus.RUNNING]

    until(lambda: len(running()) == 3, "three items running")

    # When the run is cancelled, and two of its items end
    pool.scheduler.cancel(run.id)
    for n in (0, 1):
        gates[n].set()
    until(lambda: len(running()) == 1, "two items ended")

    # Then it is still cancelling: its last item runs
    assert not store.get_run(run.id).status.terminal
    gates[2].set()
    assert _wait(store, run.id).status == "cancelled"


class Shards(BaseModel):
    n: int
    seed: int = 0
    shard_size: int = 1
    first: int = 0


def test_a_run_whose_work_so_far_was_all_reused_is_running_once_it_releases_more(
        store, tmp_path):
    # Given a source of two shards (two instances) whose results are stored, and no worker
    # (the test takes the executor's part, so nothing else runs)
    wiring = _wired(store, tmp_path)
    op("shards", params=Shards, output=N, registry=wiring.executor.registry)(
        lambda p, inputs, ctx: [N(n=p.first + i) for i in range(p.n)])
    for seq in (0, 1):
        store.put_result(_result(seq, key=f"k{seq}"))
    g = Graph()
    g.add("total", id="total", inputs=[g.add("shards", id="src", params={"n": 2})])
    run = wiring.scheduler.submit(g)
    sent = wiring.broker.queues["cpu"].qsize()
    # When each shard's claim finds its result stored and completes with it, so the node's
    # completion (of several instances) is the run's first transition
    for inst in sorted((i for i in store.instances(run.id) if i.node_id == "src"),
                       key=lambda i: i.seq):
        key = f"k{inst.seq}"
        assert wiring.scheduler.claim_and_start(inst, 1, key, "me", ttl=30)[0] == Started.STORED
        wiring.scheduler.succeeded(run.id, inst.instance_id, store.get_result(key), cached=True,
                                   started=inst)
    # Then the run is running, not pending, and the child it released is sent
    assert store.get_run(run.id).status == "running"
    assert {n.node_id: n.status for n in store.nodes(run.id)}["total"] == NodeStatus.QUEUED
    assert not [e for e in store.events(run.id) if e.type == "instance.started"]
    assert store.outbox() == [] and wiring.broker.queues["cpu"].qsize() == sent + 1


def test_the_scheduler_submits_a_loop_as_the_graph_it_compiles_to(store, tmp_path):
    # Given workers of genloop's own ops on both queues (none started: the run is only stored)
    wiring = wire(StubBroker(), store, LocalArtifactStore(tmp_path / "art"), default_registry,
                  queues=("gpu", "cpu"), sweep_every=3600.0)
    loop = Loop(prompt="a red circle", model="tiny", rounds=2, candidates=2)
    # When a loop is submitted, Then the run holds it and runs the graph it compiles to
    run = wiring.scheduler.submit(loop)
    submitted = store.run_spec(run.id)
    assert submitted.spec == loop.model_dump(mode="json")
    assert submitted.graph == loop.compile().model_dump(mode="json")
    assert {n.node_id for n in store.nodes(run.id)} == {n.id for n in loop.compile().nodes}


def test_the_scheduler_refuses_a_graph_its_workers_cannot_run_and_stores_nothing(store, tmp_path):
    # Given workers that consume the cpu queue, and an op bound for the gpu queue
    wiring = _wired(store, tmp_path)
    op("on-gpu", output=N, queue="gpu", registry=wiring.executor.registry)(
        lambda p, inputs, ctx: N(n=0))

    # When a graph of it is submitted, Then it is refused with the node and the reason
    with pytest.raises(GraphError) as refused:
        wiring.scheduler.submit(_one("on-gpu"))
    assert [(p.node_id, p.message) for p in refused.value.problems] == [
        ("only", "no workers consume queue 'gpu'; known: cpu")]
    # and nothing was stored
    assert store.runs_before(None, 10) == []


def test_a_child_of_a_map_and_a_slower_node_waits_for_both(pool, store):
    # Given a total of a map's items and of a node that ends later
    g = Graph()
    each = g.add("double", id="each", inputs=[g.add("spread", id="spread", params={"n": 3})],
                 map=True)
    g.add("total", id="total", inputs=[each, g.add("slow", id="late", params={"n": 3})])

    # When it runs, Then the total counts both: it was released by the last of its parents
    run = pool.scheduler.submit(g)
    assert _wait(store, run.id).status == "succeeded"
    (ref,) = next(n for n in store.nodes(run.id) if n.node_id == "total").outputs
    assert store.get_result(ref.key).items == [{"n": 2 * (0 + 1 + 2) + 3}]
