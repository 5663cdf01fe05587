"""The state store contract: every store implementation must pass all of it."""

from __future__ import annotations

import threading
import time

import pytest
from wait_util import until

from genloop.sdk import NotFound, RunStatus
from genloop.sdk.models import NodeStatus
from genloop.workers.stores import (
    EventRecord,
    IdempotencyConflict,
    InstanceRecord,
    ItemRef,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
)
from genloop.workers.stores.base import READ_BATCH
from genloop.workers.stores.steps import Finish, Finished, ScriptedCompletion, Start, Started


def _run(run_id="r1", key=None, spec_hash="h1", nodes=1):
    return RunRecord(id=run_id, spec_hash=spec_hash, idempotency_key=key,
                     pending_nodes=nodes, created_at=time.time())


def _counts(store, run_id: str) -> dict[str, int]:
    with store.transaction(run_id) as tx:
        return tx.ended_counts()


def _start(instance_id: str, key: str) -> Start:
    """Starting ``instance_id`` of node ``a`` of run ``r1`` on ``key``, owner ``me/ID``."""
    running = InstanceRecord(run_id="r1", instance_id=instance_id, node_id="a", seq=0,
                             status=NodeStatus.RUNNING, attempts=1, result_key=key)
    return Start(running, key, f"me/{instance_id}", 30,
                 EventRecord(type="instance.started", time=time.time()),
                 EventRecord(type="run.running", time=time.time()))


def _end(store, run_id: str, status: RunStatus = RunStatus.SUCCEEDED,
         at: float = 500.0) -> None:
    """End run ``run_id`` in a run transaction, as the scheduler's last completion does."""
    with store.transaction(run_id) as tx:
        tx.put_run(tx.run().model_copy(update={"status": status, "finished_at": at}))


def _create(store, run_id="r1", key=None, spec_hash="h1"):
    run = _run(run_id, key, spec_hash)
    node = NodeRecord(run_id=run_id, node_id="a", pending_instances=2)
    insts = [InstanceRecord(run_id=run_id, instance_id=f"a#{i}", node_id="a", seq=i)
             for i in (1, 0)]
    spec = RunSpecRecord(spec={"kind": "graph"}, graph={"nodes": [{"id": "a"}]})
    return store.create_run(run, spec, [node], insts)


def test_create_and_read_back_a_run(store):
    run, created = _create(store)

    assert created
    assert store.get_run("r1") == run
    assert store.run_spec("r1").graph == {"nodes": [{"id": "a"}]}
    assert [n.node_id for n in store.nodes("r1")] == ["a"]
    assert store.instance("r1", "a#0").seq == 0
    assert sorted(store.outbox()) == [("r1", "a#0"), ("r1", "a#1")]
    assert [e.type for e in store.events("r1")] == ["run.submitted"]


def test_a_run_of_ten_thousand_roots_is_stored_with_an_event_for_each(store):
    # More than one script call's arguments (Lua's unpack limit) of roots queued at once
    roots = [f"n{i}" for i in range(10_000)]
    nodes = [NodeRecord(run_id="r1", node_id=n, pending_instances=1, status=NodeStatus.QUEUED)
             for n in roots]
    insts = [InstanceRecord(run_id="r1", instance_id=f"{n}#0", node_id=n, seq=0) for n in roots]

    store.create_run(_run(nodes=len(roots)), RunSpecRecord(spec={}, graph={}), nodes, insts)

    events = store.events("r1", limit=len(roots) + 1)
    assert [e.node_id for e in events if e.type == "node.queued"] == roots
    assert len(store.outbox(limit=len(roots) + 1)) == len(roots)


def test_missing_things_raise_not_found_naming_what_is_missing(store):
    with pytest.raises(NotFound, match="no run 'nope'"):
        store.get_run("nope")
    with pytest.raises(NotFound, match="no run 'nope'"):
        store.run_spec("nope")
    with pytest.raises(NotFound, match="no run 'nope'"), store.transaction("nope") as tx:
        tx.run()
    _create(store)
    with pytest.raises(NotFound, match="no instance 'nope' in run 'r1'"):
        store.instance("r1", "nope")
    with pytest.raises(NotFound, match="no node 'nope' in run 'r1'"), \
            store.transaction("r1") as tx:
        tx.node("nope")
    with pytest.raises(NotFound, match="no instance 'nope' in run 'r1'"), \
            store.transaction("r1") as tx:
        tx.instance("nope")


def test_idempotency_key_reuses_or_conflicts(store):
    first, _ = _create(store, "r1", key="k")

    again, created = _create(store, "r2", key="k")
    assert not created and again.id == first.id
    with pytest.raises(NotFound):
        store.get_run("r2")
    with pytest.raises(IdempotencyConflict) as conflict:
        _create(store, "r3", key="k", spec_hash="other")
    assert conflict.value.run_id == first.id


def test_transaction_commits_together_and_rolls_back_on_error(store):
    _create(store)
    with store.transaction("r1") as tx:
        run = tx.run()
        run.status = RunStatus.RUNNING
        tx.put_run(run)
        tx.event(EventRecord(type="x", time=1.0))
    assert store.get_run("r1").status == RunStatus.RUNNING

    with pytest.raises(RuntimeError), store.transaction("r1") as tx:
        run = tx.run()
        run.status = RunStatus.FAILED
        tx.put_run(run)
        tx.add_outbox(["zzz"])
        raise RuntimeError("boom")
    assert store.get_run("r1").status == RunStatus.RUNNING
    assert ("r1", "zzz") not in store.outbox()


def test_a_transaction_reads_its_own_writes(store):
    _create(store)
    with store.transaction("r1") as tx:
        inst = tx.instance("a#1")
        inst.status = NodeStatus.SUCCEEDED
        tx.put_instance(inst)
        new = InstanceRecord(run_id="r1", instance_id="a#2", node_id="a", seq=2)
        tx.put_instance(new)
        node = tx.node("a")
        node.pending_instances = 7
        tx.put_node(node)
        run = tx.run()
        run.pending_nodes = 5
        tx.put_run(run)

        assert tx.instance("a#1").status == NodeStatus.SUCCEEDED
        assert [(i.instance_id, i.status) for i in tx.instances("a")] == [
            ("a#0", NodeStatus.QUEUED), ("a#1", NodeStatus.SUCCEEDED), ("a#2", NodeStatus.QUEUED)]
        assert tx.node("a").pending_instances == 7
        assert tx.run().pending_nodes == 5


def test_instances_come_back_in_seq_order(store):
    _create(store)
    with store.transaction("r1") as tx:
        assert [i.instance_id for i in tx.instances("a")] == ["a#0", "a#1"]


def test_transactions_on_one_run_are_serializable(store):
    """Many threads decrementing one counter read-modify-write: no update is lost."""
    _create(store)

    def decrement():
        for _ in range(10):
            with store.transaction("r1") as tx:
                node = tx.node("a")
                node.pending_instances -= 1
                tx.put_node(node)

    threads = [threading.Thread(target=decrement) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.nodes("r1")[0].pending_instances == 2 - 40


def test_concurrent_transactions_commit_before_returning_and_fail_alone(store):
    """Given threads committing at once (SQLite shares their commits), when some raise, then
    only those writes are gone, and every transaction that returned is visible to any reader
    at once."""
    _create(store)
    seen_late: list[str] = []

    def work(t: int):
        for j in range(8):
            entry = f"t{t}-{j}"
            try:
                with store.transaction("r1") as tx:
                    node = tx.node("a")
                    node.pending_instances -= 1
                    tx.put_node(node)
                    tx.add_outbox([entry])
                    if j % 3 == 0:
                        raise RuntimeError("this one fails")
            except RuntimeError:
                continue
            if ("r1", entry) not in store.outbox():
                seen_late.append(entry)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = {i for r, i in store.outbox() if r == "r1" and i.startswith("t")}
    assert committed == {f"t{t}-{j}" for t in range(4) for j in range(8) if j % 3}
    assert store.nodes("r1")[0].pending_instances == 2 - len(committed)
    assert seen_late == []


def test_first_result_wins(store):
    a = ResultRecord(key="k", op="x", items=[1], created_at=1.0)
    b = ResultRecord(key="k", op="x", items=[2], created_at=2.0)

    assert store.get_result("k") is None
    assert store.put_result(a) == a
    assert store.put_result(b) == a
    assert store.get_result("k").items == [1]


def test_results_are_read_many_at_once_across_batches_and_missing_ones_left_out(store):
    from genloop.workers.stores.base import READ_BATCH

    keys = [f"k{i}" for i in range(2 * READ_BATCH + 3)]
    for i, key in enumerate(keys[::2]):
        store.put_result(ResultRecord(key=key, op="op", items=[i], created_at=1.0))
    found = store.get_results(keys + ["nothing"])
    assert sorted(found) == sorted(keys[::2])
    assert [found[key].items for key in keys[::2][:3]] == [[0], [1], [2]]
    assert found[keys[-1]].key == keys[-1]  # past the first batch
    assert store.get_results([]) == {}


def test_claims_are_exclusive_until_released_or_expired(store):
    assert store.claim("k", "w1", ttl=5)
    assert not store.claim("k", "w2", ttl=5)
    assert 0 < store.lease_remaining("k") <= 5
    assert store.renew("k", "w1", ttl=5)
    assert not store.renew("k", "w2", ttl=5)

    store.release("k", "w2")  # not the holder: no effect
    assert not store.claim("k", "w2", ttl=5)
    store.release("k", "w1")
    assert store.lease_remaining("k") == 0
    assert store.claim("k", "w2", ttl=0.05)
    # Waits for the store to report the lease ended, not for a sleep to outlast it
    until(lambda: store.lease_remaining("k") == 0, "the 50 ms lease to end")
    assert store.claim("k", "w3", ttl=5)


def test_locks_are_exclusive(store):
    assert store.try_lock("sweeper", "a", ttl=5)
    assert store.try_lock("sweeper", "a", ttl=5)
    assert not store.try_lock("sweeper", "b", ttl=5)


def test_outbox_age_and_clear(store):
    _create(store)
    assert store.outbox(older_than=60) == []
    store.clear_outbox([("r1", "a#0")])
    assert store.outbox() == [("r1", "a#1")]


def test_events_have_increasing_ids_and_resume_after_an_id(store):
    _create(store)
    ids = [store.append_event("r1", EventRecord(type="progress", time=1.0, step=i, total=3))
           for i in range(3)]

    assert ids == sorted(ids)
    events = store.events("r1")
    assert [e.type for e in events] == ["run.submitted", "progress", "progress", "progress"]
    after = store.events("r1", after=events[1].id)
    assert [e.step for e in after] == [1, 2]
    # A page read after an id keeps the ids the events have (a follower resumes from them)
    assert [e.id for e in after] == [e.id for e in events[2:]]
    paged, last = [], 0
    while page := store.events("r1", after=last, limit=2):
        paged, last = paged + page, page[-1].id
    assert paged == events
    assert store.events("r1", after=events[-1].id) == []
    assert [e.step for e in store.events("r1", after=0, limit=2)][1] == 0


def test_event_ids_are_numbered_per_run(store):
    # Given two runs whose events interleave
    _create(store, "r1")
    _create(store, "r2", spec_hash="h2")
    for i in range(3):
        store.append_event("r2", EventRecord(type="progress", time=1.0, step=i, total=3))
    store.append_event("r1", EventRecord(type="progress", time=1.0, step=0, total=1))
    # Then each run's ids count its own events only: they reveal nothing of the other run
    assert [e.id for e in store.events("r1")] == [1, 2]
    assert [e.id for e in store.events("r2")] == [1, 2, 3, 4]


def test_stale_instances_are_the_unfinished_ones_nobody_touched(store):
    _create(store)
    until(lambda: len(store.stale_instances(older_than=0.01)) == 2, "10 ms untouched")
    assert sorted(store.stale_instances(older_than=0.01)) == [("r1", "a#0"), ("r1", "a#1")]
    assert store.stale_instances(older_than=60) == []

    with store.transaction("r1") as tx:
        done = tx.instance("a#0")
        done.status = NodeStatus.SUCCEEDED
        tx.put_instance(done)
    store.touch([("r1", "a#1"), ("r1", "a#0")])

    assert store.stale_instances(older_than=2) == []  # seconds apart even on a loaded machine
    until(lambda: store.stale_instances(older_than=0.01), "a#1 untouched for 10 ms")
    assert store.stale_instances(older_than=0.01) == [("r1", "a#1")]


def test_status_values_round_trip(store):
    _create(store)
    with store.transaction("r1") as tx:
        inst = tx.instance("a#0")
        inst.status = NodeStatus.SUCCEEDED
        inst.result_key = "k"
        tx.put_instance(inst)
    assert store.instance("r1", "a#0").status == NodeStatus.SUCCEEDED
    assert store.instances("r1")[0].result_key == "k"


def test_quarantine_takes_an_instance_out_of_recovery_and_says_so(store):
    _create(store)
    until(lambda: len(store.stale_instances(older_than=0.01)) == 2, "10 ms untouched")

    store.quarantine("r1", "a#0", "ValidationError: max_backoff is not finite")

    assert store.stale_instances(older_than=0.01) == [("r1", "a#1")]
    assert store.outbox() == [("r1", "a#1")]
    (event,) = [e for e in store.events("r1") if e.type == "instance.quarantined"]
    assert event.instance_id == "a#0" and "max_backoff" in event.error


def test_a_sqlite_store_with_global_event_ids_is_renumbered_per_run(tmp_path):
    import sqlite3

    # Given a state.db from before event ids were per run: one table, ids shared by all runs
    db = sqlite3.connect(tmp_path / "state.db")
    db.executescript("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                     "run_id TEXT NOT NULL, doc TEXT NOT NULL);")
    for run_id, step in [("r1", 0), ("r2", 0), ("r1", 1), ("r2", 1), ("r2", 2)]:
        doc = EventRecord(type="progress", time=1.0, step=step).model_dump_json()
        db.execute("INSERT INTO events (run_id, doc) VALUES (?, ?)", (run_id, doc))
    db.commit()
    db.close()
    # When the store opens it, then each run's events are numbered 1, 2, ... in their order
    from genloop.workers.stores import SqliteStateStore

    store = SqliteStateStore(tmp_path / "state.db")
    assert [(e.id, e.step) for e in store.events("r1")] == [(1, 0), (2, 1)]
    assert [(e.id, e.step) for e in store.events("r2")] == [(1, 0), (2, 1), (3, 2)]
    assert store.append_event("r1", EventRecord(type="progress", time=1.0, step=2)) == 3
    store.close()


def test_a_sqlite_store_with_specs_in_the_runs_rows_moves_them_to_their_own_table(tmp_path):
    import sqlite3

    # Given a state.db from before specs had their own table: each in its run's row
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, idem_key TEXT UNIQUE, "
               "doc TEXT NOT NULL, spec TEXT NOT NULL)")
    spec = RunSpecRecord(spec={"kind": "graph"}, graph={"nodes": [{"id": "a"}]})
    db.execute("INSERT INTO runs VALUES (?, ?, ?, ?)",
               ("r0", None, _run("r0").model_dump_json(), spec.model_dump_json()))
    db.commit()
    db.close()
    # When the store opens it, then the old run's spec reads back and new runs are stored
    from genloop.workers.stores import SqliteStateStore

    store = SqliteStateStore(tmp_path / "state.db")
    assert store.run_spec("r0") == spec and store.get_run("r0").id == "r0"
    _create(store)
    assert store.run_spec("r1") == spec
    store.close()
    columns = [c[1] for c in sqlite3.connect(tmp_path / "state.db").execute(
        "PRAGMA table_info(runs)")]
    assert columns == ["id", "idem_key", "doc"]


def test_a_start_that_finds_the_key_leased_touches_the_instance(store):
    # Given a run whose instances nobody has touched for a while, and a key leased elsewhere
    _create(store)
    assert store.claim("k", "holder", ttl=30)
    # (a window wide enough that the touch below stays fresh on a loaded machine: at 0.01 s
    # the next read could come too late and find a#1 stale again)
    until(lambda: len(store.stale_instances(older_than=0.25)) == 2, "both instances stale")
    assert sorted(store.stale_instances(older_than=0.25)) == [("r1", "a#0"), ("r1", "a#1")]

    # When a delivery of a#1 tries to start on that key
    running = store.instance("r1", "a#1").model_copy(update={
        "status": NodeStatus.RUNNING, "attempts": 1, "result_key": "k"})
    [(outcome, lease)] = store.start_instances([Start(
        running, "k", "looker", 30, EventRecord(type="instance.started", time=time.time()),
        EventRecord(type="run.running", time=time.time()))])

    # Then it is told the key is leased, a#1 is not started, and it counts as just seen
    assert outcome == "leased" and 0 < lease <= 30
    assert store.instance("r1", "a#1").status == NodeStatus.QUEUED
    assert store.stale_instances(older_than=0.25) == [("r1", "a#0")]


def test_several_starts_and_finishes_go_in_one_call_each_with_its_own_outcome(store):
    # Given a run of two instances, and a key leased elsewhere
    _create(store)
    assert store.claim("held", "other", ttl=30)

    # When three starts go in one call: a free key, the leased one, and an unknown instance
    outcomes = store.start_instances([_start("a#0", "k0"), _start("a#1", "held"),
                                      _start("a#9", "k9")])

    # Then each has its own outcome, and only the first started
    assert [o for o, _ in outcomes] == ["started", "leased", "missing"]
    assert 0 < outcomes[1][1] <= 30
    assert store.instance("r1", "a#0").status == NodeStatus.RUNNING
    assert store.instance("r1", "a#1").status == NodeStatus.QUEUED

    # When a#0 finishes twice in one call (a duplicate delivery's finish behind the first)
    done = store.instance("r1", "a#0").model_copy(update={
        "status": NodeStatus.SUCCEEDED, "outputs": 1})
    result = ResultRecord(key="k0", op="o", items=[{"v": 1}], created_at=time.time())
    finish = Finish(done, EventRecord(type="instance.succeeded", time=time.time()), result,
                    ("k0", "me/a#0"))
    outs = store.finish_instances([finish, finish])

    # Then the second sees the first's write: the node counted down once, the result stored,
    # the lease dropped
    assert [(o.step, o.pending) for o in outs] == [(Finished.COUNTED, 1), (Finished.ENDED, 0)]
    assert store.get_result("k0").items == [{"v": 1}]
    assert store.instance("r1", "a#0").status == NodeStatus.SUCCEEDED
    assert store.claim("k0", "someone", ttl=30)


def test_finishes_in_one_call_complete_nodes_count_the_run_down_and_end_it(store):
    # Given a run that keeps its ended counts: roots a and b, and c waiting on both
    run = _run(nodes=3).model_copy(update={"counts_ended": True})
    nodes = [NodeRecord(run_id="r1", node_id=n, pending_instances=1, status=NodeStatus.QUEUED)
             for n in ("a", "b")] + [NodeRecord(run_id="r1", node_id="c", waiting=2)]
    insts = [InstanceRecord(run_id="r1", instance_id=f"{n}#0", node_id=n, seq=0)
             for n in ("a", "b", "c")]
    store.create_run(run, RunSpecRecord(spec={}, graph={}), nodes, insts)

    def finish(node_id: str, children: list[str]) -> Finish:
        done = insts["abc".index(node_id)].model_copy(update={
            "status": NodeStatus.SUCCEEDED, "outputs": 1, "result_key": f"k{node_id}"})
        completion = ScriptedCompletion(
            f'[{{"key": "k{node_id}", "index": 0}}]', 1,
            EventRecord(type="node.succeeded", time=time.time(), node_id=node_id),
            EventRecord(type="run.succeeded", time=time.time()), children)
        return Finish(done, EventRecord(type="instance.succeeded", time=time.time()),
                      ResultRecord(key=f"k{node_id}", op="o", items=[1], created_at=time.time()),
                      None, completion)

    # When a and b finish in one call
    outs = store.finish_instances([finish("a", ["c"]), finish("b", ["c"])])

    # Then each completed its node, the second released c, and the run counts one node left
    assert [(o.step, o.run_ended, o.ready) for o in outs] == [
        (Finished.COMPLETED, False, []), (Finished.COMPLETED, False, ["c"])]
    assert store.get_run("r1").pending_nodes == 1
    assert _counts(store, "r1") == {"a": 1, "b": 1}
    status = {n.node_id: n.status for n in store.nodes("r1")}
    assert (status["a"], status["b"]) == (NodeStatus.SUCCEEDED, NodeStatus.SUCCEEDED)

    # When c finishes
    [out] = store.finish_instances([finish("c", [])])

    # Then the run has ended, with every event numbered in order
    assert (out.step, out.run_ended) == (Finished.COMPLETED, True)
    ended = store.get_run("r1")
    assert (ended.status, ended.pending_nodes) == (RunStatus.SUCCEEDED, 0)
    assert _counts(store, "r1") == {"a": 1, "b": 1, "c": 1}
    events = store.events("r1")
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events][-2:] == ["node.succeeded", "run.succeeded"]


def test_runs_page_newest_first_without_gaps_or_repeats_while_runs_arrive(store):
    spec = RunSpecRecord(spec={"kind": "graph"}, graph={"nodes": []})

    def add(run_id: str, at: float) -> None:
        run = RunRecord(id=run_id, spec_hash="h", created_at=at, labels={"n": run_id})
        store.create_run(run, spec, [], [])

    # Three runs share each time: the cursor must order them by id too
    for i in range(30):
        add(f"r{i:02d}", 1000.0 + i // 3)
    seen, before = [], None
    while page := store.runs_before(before, 4):
        seen += [r.id for r in page]
        before = (page[-1].created_at, page[-1].id)
        add(f"new{len(seen)}", 2000.0 + len(seen))  # newer than every page: never listed here
    assert seen == sorted((f"r{i:02d}" for i in range(30)), key=lambda r: (int(r[1:]) // 3, r),
                          reverse=True)
    assert store.runs_before(None, 1)[0].id.startswith("new")
    assert store.runs_before(None, 50)[-1].labels == {"n": "r00"}


def test_a_start_on_a_key_with_a_stored_result_runs_nothing_and_takes_no_lease(store):
    # Given a run, and a result already stored under the key its instance would compute
    _create(store)
    store.put_result(ResultRecord(key="k", op="o", items=[{"v": 1}], created_at=time.time()))

    # When a delivery of a#0 tries to start on that key
    [(outcome, lease)] = store.start_instances([_start("a#0", "k")])

    # Then it is told the result is stored (the caller completes with it): the instance is not
    # started, no lease is taken, so no op body runs for a key that has its result
    assert (outcome, lease) == ("stored", 0)
    assert store.instance("r1", "a#0").status == NodeStatus.QUEUED
    assert store.claim("k", "someone", ttl=30)
    assert [e.type for e in store.events("r1")] == ["run.submitted"]


def test_a_start_in_a_cancelling_run_runs_nothing(store):
    # Given a run whose cancel was asked while a#0 was still queued (its message in flight)
    _create(store)
    with store.transaction("r1") as tx:
        run = tx.run()
        run.cancel_requested = True
        tx.put_run(run)

    # When that message is delivered and a#0 tries to start
    [(outcome, _)] = store.start_instances([_start("a#0", "k0")])

    # Then it is told the run is cancelling: not started, no lease taken
    assert outcome == "cancelling"
    assert store.instance("r1", "a#0").status == NodeStatus.QUEUED
    assert store.claim("k0", "someone", ttl=30)


def test_the_first_start_marks_its_node_and_a_pending_run_running_and_says_so_once(store):
    # Given a pending run of two queued instances
    _create(store)
    assert store.get_run("r1").status == RunStatus.PENDING

    # When both start in one call
    outcomes = store.start_instances([_start("a#0", "k0"), _start("a#1", "k1")])

    # Then their node and the run are running, and the run says so once, after the first start
    assert [o for o, _ in outcomes] == ["started", "started"]
    assert store.get_run("r1").status == RunStatus.RUNNING
    assert [n.status for n in store.nodes("r1")] == [NodeStatus.RUNNING]
    assert [e.type for e in store.events("r1")] == [
        "run.submitted", "instance.started", "run.running", "instance.started"]
    # And a started instance stays in recovery's view: if its worker dies, it is found stale
    until(lambda: len(store.stale_instances(older_than=0.01)) == 2, "started, untouched 10 ms")


def _done(instance_id: str, key: str) -> InstanceRecord:
    return InstanceRecord(run_id="r1", instance_id=instance_id, node_id="a", seq=0,
                          status=NodeStatus.SUCCEEDED, attempts=1, result_key=key, outputs=1)


def _finish(instance_id: str, key: str, completion: ScriptedCompletion | None = None) -> Finish:
    """Finishing ``instance_id`` of node ``a`` of run ``r1`` with a result under ``key``,
    dropping the lease ``me/ID`` holds on it."""
    return Finish(_done(instance_id, key), EventRecord(type="instance.succeeded", time=time.time()),
                  ResultRecord(key=key, op="o", items=[{"v": instance_id}], created_at=time.time()),
                  (key, f"me/{instance_id}"), completion)


def _completion(children: list[str]) -> ScriptedCompletion:
    return ScriptedCompletion(
        '[{"key": "ka", "index": 0}]', 1,
        EventRecord(type="node.succeeded", time=time.time(), node_id="a"),
        EventRecord(type="run.succeeded", time=time.time()), children)


def test_a_finish_of_an_unknown_instance_or_onto_another_result_writes_nothing_but_its_lease(
        store):
    # Given a run whose a#1 has started on k1, a result another execution stored under k1,
    # and a lease on k9 held for an instance the run does not have
    _create(store)
    store.start_instances([_start("a#1", "k1")])
    store.put_result(ResultRecord(key="k1", op="o", items=[{"v": "theirs"}],
                                  created_at=time.time()))
    assert store.claim("k9", "me/a#9", ttl=30)
    before = store.events("r1")

    # When a#9 and a#1 finish in one call
    outs = store.finish_instances([_finish("a#9", "k9"), _finish("a#1", "k1")])

    # Then each is told why nothing was written: no instance, another's result first
    assert [(o.step, o.wrote_event) for o in outs] == [
        (Finished.MISSING, False), (Finished.OTHER_RESULT, False)]
    assert store.get_result("k9") is None
    assert store.get_result("k1").items == [{"v": "theirs"}]
    assert store.instance("r1", "a#1").status == NodeStatus.RUNNING
    assert store.events("r1") == before
    # And both leases are dropped all the same: the work they guarded is over
    assert store.claim("k9", "someone", ttl=30) and store.claim("k1", "someone", ttl=30)


def test_a_node_is_marked_done_only_when_its_last_instance_finishes(store):
    # Given a node of two instances (a completion offered: a node of two is never completed
    # in the step, whose result would miss the other instance's outputs)
    _create(store)

    # When a#0 finishes
    [first] = store.finish_instances([_finish("a#0", "k0", _completion([]))])

    # Then the node counts one instance left and is not marked done
    assert (first.step, first.pending) == (Finished.COUNTED, 1)
    assert ("r1", "@a") not in store.outbox()

    # When a#1 finishes
    [last] = store.finish_instances([_finish("a#1", "k1", _completion([]))])

    # Then the node is left to the caller, marked done for the sweeper should the caller die
    assert (last.step, last.pending) == (Finished.COUNTED, 0)
    assert ("r1", "@a") in store.outbox()
    assert store.nodes("r1")[0].status != NodeStatus.SUCCEEDED


@pytest.mark.parametrize("case", ["no completion", "cancelling", "run error", "node outputs"])
def test_a_finished_node_the_step_may_not_complete_is_left_to_the_caller(store, case):
    # Given node a of one instance with child c waiting on it, and a reason, one per case, for
    # the step not to complete a: no completion offered, a cancelling run (a's status would be
    # cancelled), a run error to report once its last node ends, outputs a already holds
    run = _run(nodes=1 if case == "run error" else 2).model_copy(update={
        "cancel_requested": case == "cancelling", "error": "boom" if case == "run error" else None})
    outputs = [ItemRef(key="kx", index=0)] if case == "node outputs" else []
    nodes = [NodeRecord(run_id="r1", node_id="a", pending_instances=1, outputs=outputs),
             NodeRecord(run_id="r1", node_id="c", waiting=1)]
    store.create_run(run, RunSpecRecord(spec={}, graph={}), nodes,
                     [InstanceRecord(run_id="r1", instance_id="a#0", node_id="a", seq=0)])

    # When a#0 finishes
    completion = None if case == "no completion" else _completion(["c"])
    [out] = store.finish_instances([_finish("a#0", "ka", completion)])

    # Then a is counted down and marked done for the caller, and nothing past it is written
    assert (out.step, out.pending, out.run_ended, out.ready) == (Finished.COUNTED, 0, False, [])
    assert ("r1", "@a") in store.outbox() and ("r1", "@c") not in store.outbox()
    a, c = sorted(store.nodes("r1"), key=lambda n: n.node_id)
    assert (a.status, a.outputs, c.waiting) == (NodeStatus.PENDING, outputs, 1)
    assert store.get_run("r1").pending_nodes == run.pending_nodes


def _two_roots(store, **update) -> None:
    """A pending run ``r1`` of roots ``a`` and ``b``, one instance each, nothing started."""
    nodes = [NodeRecord(run_id="r1", node_id=n, pending_instances=1) for n in ("a", "b")]
    insts = [InstanceRecord(run_id="r1", instance_id=f"{n}#0", node_id=n, seq=0)
             for n in ("a", "b")]
    store.create_run(_run(nodes=2).model_copy(update=update), RunSpecRecord(spec={}, graph={}),
                     nodes, insts)


def test_a_completion_in_a_run_still_pending_makes_it_running(store):
    # Given a pending run of two roots, nothing started (a's result was cached, say)
    _two_roots(store)

    # When a finishes and the step completes its node
    [out] = store.finish_instances([_finish("a#0", "ka", _completion([]))])

    # Then the run counts one node left and is running
    assert (out.step, out.run_ended) == (Finished.COMPLETED, False)
    assert (store.get_run("r1").status, store.get_run("r1").pending_nodes) == (
        RunStatus.RUNNING, 1)


def test_a_run_error_leaves_to_the_caller_only_the_completion_that_would_end_the_run(store):
    # Given a run with an error to report (a node failed, say) and two roots left
    _two_roots(store, error="boom")

    # When a finishes: b is left, so no run error is reported yet
    [out] = store.finish_instances([_finish("a#0", "ka", _completion([]))])

    # Then the step completes a itself (the last node's completion is the caller's: see the
    # "run error" case above)
    assert (out.step, out.run_ended) == (Finished.COMPLETED, False)
    assert store.get_run("r1").pending_nodes == 1


def _beside(store, tmp_path):
    """Another store of the same kind where a store's neighbour would be: another key prefix
    on the same Redis database, another SQLite file."""
    from redis_util import redis_url

    from genloop.workers.stores import SqliteStateStore
    from genloop.workers.stores.redis import RedisStateStore

    if isinstance(store, RedisStateStore):
        return RedisStateStore(redis_url(), prefix=f"{store.keys.p}-beside")
    return SqliteStateStore(tmp_path / "beside.db")


def test_reference_docs_are_every_result_and_spec_once_and_none_of_a_neighbours(store, tmp_path):
    # Given more results than one read batch, two runs' specs, and a neighbour's result
    keys = [f"k{i:04d}" for i in range(READ_BATCH + 7)]
    for key in keys:
        store.put_result(ResultRecord(key=key, op="op", items=[key], created_at=time.time()))
    for run_id in ("r1", "r2"):
        _create(store, run_id)
    neighbour = _beside(store, tmp_path)
    try:
        neighbour.put_result(ResultRecord(key="theirs", op="op", items=[], created_at=0.0))
        # Then the collector reads each of them once, as the JSON it was stored as
        docs = list(store.reference_docs())
    finally:
        neighbour.close()
    results = sorted(ResultRecord.model_validate_json(d).key for d in docs if '"op"' in d)
    specs = [RunSpecRecord.model_validate_json(d) for d in docs if '"op"' not in d]
    assert results == keys
    assert [s.graph for s in specs] == [{"nodes": [{"id": "a"}]}] * 2


def test_runs_page_by_cursor_without_gaps_or_repeats_through_a_tie_longer_than_a_read(store):
    # Given 45 runs created at one instant (more than a page and a read's slack) between others
    made = {f"t{i:02d}": 1000.0 for i in range(45)} | {"early": 999.0, "late": 1001.0}
    for run_id, created in made.items():
        store.create_run(RunRecord(id=run_id, spec_hash="h", created_at=created),
                         RunSpecRecord(spec={}, graph={}), [], [])
    # When they are paged 4 at a time from the newest
    pages, before = [], None
    while page := store.runs_before(before, 4):
        pages.append([r.id for r in page])
        before = (page[-1].created_at, page[-1].id)
    # Then each comes once, newest first, ties by id from the last
    seen = [run_id for page in pages for run_id in page]
    assert seen == ["late", *sorted((f"t{i:02d}" for i in range(45)), reverse=True), "early"]
    assert all(len(page) == 4 for page in pages[:-1])


def test_a_runs_end_wakes_the_watches_on_it_and_no_others(store):
    # Given two runs of one node each, each watched before anything ends
    for run_id in ("r1", "r2"):
        store.create_run(_run(run_id), RunSpecRecord(spec={}, graph={}),
                         [NodeRecord(run_id=run_id, node_id="a", pending_instances=1,
                                     status=NodeStatus.QUEUED)],
                         [InstanceRecord(run_id=run_id, instance_id="a#0", node_id="a", seq=0)])
    with store.watch_end("r1") as first, store.watch_end("r2") as second:
        # Then a watch on a run still going sleeps out its timeout
        assert first.wait(0.05) is False

        # When r1's only instance finishes, and the finish step ends the run
        done = store.instance("r1", "a#0").model_copy(update={
            "status": NodeStatus.SUCCEEDED, "outputs": 1, "result_key": "k1"})
        completion = ScriptedCompletion(
            '[{"key": "k1", "index": 0}]', 1,
            EventRecord(type="node.succeeded", time=time.time(), node_id="a"),
            EventRecord(type="run.succeeded", time=time.time()), [])
        [out] = store.finish_instances([Finish(
            done, EventRecord(type="instance.succeeded", time=time.time()),
            ResultRecord(key="k1", op="o", items=[1], created_at=time.time()), None, completion)])
        assert out.run_ended

        # Then r1's watch wakes, and r2's (its run still going) does not
        assert first.wait(5.0) is True
        assert second.wait(0.05) is False

        # When a run transaction on r2 commits without ending it, Then its watch sleeps on
        with store.transaction("r2") as tx:
            tx.event(EventRecord(type="test.note", time=time.time()))
        assert second.wait(0.05) is False

        # When a run transaction ends r2
        _end(store, "r2", RunStatus.CANCELLED, time.time())

        # Then r2's watch wakes
        assert second.wait(5.0) is True


def _while_a_transaction_is_open(store, step):
    """``step()`` sent while another thread holds run ``r1``'s transaction open: whether it was
    still waiting 0.3 s in, and what it returned once the transaction committed."""
    entered, release, out = threading.Event(), threading.Event(), []

    def hold():
        with store.transaction("r1") as tx:
            tx.event(EventRecord(type="test.held", time=time.time()))
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(5)
    sender = threading.Thread(target=lambda: out.append(step()))
    sender.start()
    sender.join(0.3)
    waiting = sender.is_alive()
    release.set()
    holder.join(10)
    sender.join(10)
    return waiting, out[0]


@pytest.mark.parametrize("count", [1, 2])
def test_starts_and_finishes_sent_while_a_run_transaction_is_open_wait_for_its_commit(
        store, count):
    # Given a run of two instances
    _create(store)
    ids = [f"a#{i}" for i in range(count)]

    # When starts are sent (one alone, or two in one call) while a run transaction is open
    waiting, started = _while_a_transaction_is_open(
        store, lambda: store.start_instances([_start(i, f"k{i}") for i in ids]))

    # Then they wait for its commit, and then start
    assert waiting
    assert [s for s, _ in started] == [Started.STARTED] * count
    events = [e.type for e in store.events("r1")]
    assert events.index("test.held") < events.index("instance.started")

    # When their finishes are sent the same way
    def finish(instance_id: str) -> Finish:
        done = store.instance("r1", instance_id).model_copy(update={
            "status": NodeStatus.SUCCEEDED, "outputs": 1})
        key = f"k{instance_id}"
        return Finish(done, EventRecord(type="instance.succeeded", time=time.time()),
                      ResultRecord(key=key, op="o", items=[1], created_at=time.time()),
                      (key, f"me/{instance_id}"))

    waiting, outs = _while_a_transaction_is_open(
        store, lambda: store.finish_instances([finish(i) for i in ids]))

    # Then they too wait, and then each counts its node down
    assert waiting
    assert [o.pending for o in outs] == list(range(1, 1 - count, -1))
    assert [store.instance("r1", i).status for i in ids] == [NodeStatus.SUCCEEDED] * count


def test_a_start_that_reuses_a_stored_result_keeps_it_at_least_a_retention_more(store):
    # Given a result whose run's expiry made it due long ago, and another one the same
    _create(store)
    for key in ("reused", "left"):
        store.put_result(ResultRecord(key=key, op="o", items=[1], created_at=1.0))
    store.schedule_expiry("old", 1000.0, ["reused", "left"])

    # When a start finds the first one stored
    [(outcome, _)] = store.start_instances([_start("a#0", "reused")])
    assert outcome == Started.STORED

    # Then it is due no sooner than a retention from now; the other is due as it was
    now = time.time()
    assert store.due_results(now, 10) == ["left"]
    assert store.due_results(now + store.retention - 60, 10) == ["left"]
    assert store.due_results(now + store.retention + 60, 10) == ["left", "reused"]


def test_a_transaction_drops_its_owners_lease_when_it_commits_and_no_one_elses(store):
    _create(store)
    assert store.claim("k", "w1", ttl=30)
    with store.transaction("r1") as tx:
        tx.release("k", "w2")  # not w2's lease: it stays w1's
    assert not store.claim("k", "w2", ttl=30)
    with store.transaction("r1") as tx:
        tx.release("k", "w1")
    assert store.claim("k", "w2", ttl=30)


def test_expiring_runs_names_each_run_that_went(store):
    # Given two ended runs, one due to expire and one not yet
    for run_id in ("r1", "r2"):
        _create(store, run_id)
        _end(store, run_id)
    store.schedule_expiry("r1", 1000.0, [])
    store.schedule_expiry("r2", 3000.0, [])

    # When runs due by 2000 expire, Then r1 is named and gone, and r2 stays
    assert store.expire_runs(2000.0, 10) == ["r1"]
    with pytest.raises(NotFound):
        store.get_run("r1")
    assert store.get_run("r2").status == RunStatus.SUCCEEDED


def test_a_sqlite_store_makes_its_folder(tmp_path):
    from genloop.workers.stores import SqliteStateStore

    store = SqliteStateStore(tmp_path / "home" / "state" / "state.db")
    _create(store)
    assert store.get_run("r1").id == "r1"
    store.close()


def test_a_sqlite_store_from_before_run_listing_and_retention_lists_and_retains_its_runs(
        tmp_path):
    import sqlite3

    from genloop.workers.stores import SqliteStateStore

    # Given a store with an ended run, whose file then loses the run index and the ended list
    # (the layout before the listing and retention added them)
    path = tmp_path / "state.db"
    store = SqliteStateStore(path)
    _create(store)
    _end(store, "r1")
    store.close()
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE run_index; DROP TABLE run_ended;")
    db.close()

    # When it is opened, Then the run is listed and waits for the retention pass
    store = SqliteStateStore(path)
    assert [r.id for r in store.runs_before(None, 10)] == ["r1"]
    assert store.ended_runs(10) == ["r1"]

    # When the pass has scheduled it, Then opening the store again leaves that as it is
    store.schedule_expiry("r1", 1000.0, [])
    store.close()
    store = SqliteStateStore(path)
    assert store.ended_runs(10) == []
    assert [r.id for r in store.runs_before(None, 10)] == ["r1"]
    store.close()
