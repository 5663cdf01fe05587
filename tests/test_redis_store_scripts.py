"""The Redis store's transition scripts where only Redis has the case: a Redis that forgot them
(restarted, SCRIPT FLUSH), a script beside a run transaction that holds the run's lock (the
SQLite store has no such interleaving: its steps and transactions take turns), a watch on a
run's end whose connection Redis dropped, and the store's default address."""

from __future__ import annotations

import time
import uuid

import pytest
from contract.test_state_store import _create, _start
from redis_util import redis_url

from genloop.sdk import RunStatus, StoreError
from genloop.sdk.models import NodeStatus
from genloop.workers.stores import (
    EventRecord,
    InstanceRecord,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
)
from genloop.workers.stores.redis import RedisStateStore
from genloop.workers.stores.steps import Finish, Finished, ScriptedCompletion


def test_starts_sent_together_reload_the_scripts_a_restarted_redis_forgot():
    store = RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    try:
        # Given a run, and a Redis whose scripts are gone
        _create(store)
        store.client.script_flush()

        # When two instances start in one call (one pipeline)
        outcomes = store.start_instances([_start("a#0", "k0"), _start("a#1", "k1")])

        # Then both started
        assert [o for o, _ in outcomes] == ["started", "started"]
        assert {store.instance("r1", i).status for i in ("a#0", "a#1")} == {NodeStatus.RUNNING}
    finally:
        store.close()


def test_a_node_completed_while_a_shared_transaction_is_open_loses_no_child_count():
    """FINISH completes a node of one instance itself only while no transaction holds the run's
    lock: a shared one (another node's completion) may be rewriting the same child and the
    run, and its commit would overwrite what the script wrote, leaving the child waiting for a
    parent that has already ended: never released."""
    store = RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    try:
        # Given c waiting on m (a map whose instances have all ended) and a (one instance)
        run = RunRecord(id="r1", spec_hash="h", pending_nodes=3, status=RunStatus.RUNNING,
                        created_at=time.time(), counts_ended=True)
        nodes = [NodeRecord(run_id="r1", node_id="m", status=NodeStatus.RUNNING),
                 NodeRecord(run_id="r1", node_id="a", status=NodeStatus.QUEUED,
                            pending_instances=1),
                 NodeRecord(run_id="r1", node_id="c", waiting=2)]
        a0 = InstanceRecord(run_id="r1", instance_id="a#0", node_id="a", seq=0)
        store.create_run(run, RunSpecRecord(spec={}, graph={}), nodes, [a0])
        done = a0.model_copy(update={"status": NodeStatus.SUCCEEDED, "outputs": 1,
                                     "result_key": "ka"})
        finish = Finish(
            done, EventRecord(type="instance.succeeded", time=time.time()),
            ResultRecord(key="ka", op="o", items=[1], created_at=time.time()), None,
            ScriptedCompletion('[{"key": "ka", "index": 0}]', 1,
                               EventRecord(type="node.succeeded", time=time.time()),
                               EventRecord(type="run.succeeded", time=time.time()), ["c"]))

        # When m's completion runs in a shared transaction (as Scheduler.finish_node does it),
        # and a's only instance finishes between that transaction's reads and its commit
        with store.transaction("r1", shared=True) as tx:
            m, child, current = tx.node("m"), tx.node("c"), tx.run()
            [out] = store.finish_instances([finish])
            m.status, child.waiting = NodeStatus.SUCCEEDED, child.waiting - 1
            current.pending_nodes -= 1
            tx.put_node(m)
            tx.put_node(child)
            tx.put_run(current)

        # Then c waits for exactly the parents not completed yet, and the run counts exactly
        # the nodes not ended: a's completion is left to a run transaction (its outbox mark)
        after = {n.node_id: n for n in store.nodes("r1")}
        open_parents = [p for p in ("m", "a") if after[p].status != NodeStatus.SUCCEEDED]
        assert after["c"].waiting == len(open_parents), (out, open_parents)
        assert store.get_run("r1").pending_nodes == sum(
            not n.status.terminal for n in after.values())
        assert (out.step, out.pending) == (Finished.COUNTED, 0) and ("r1", "@a") in store.outbox()
    finally:
        store.close()


def test_a_pools_keys_stay_where_an_earlier_release_wrote_them():
    # An upgrade must find the runs a running pool wrote: the default prefix is a format
    store = RedisStateStore(redis_url())
    run_id = f"pin-{uuid.uuid4().hex[:8]}"
    try:
        _create(store, run_id=run_id)
        assert store.client.exists(f"genloop:run:{run_id}")
    finally:
        store.client.delete(*store.client.keys(f"genloop:run:{run_id}*"))
        store.client.zrem("genloop:runs", run_id)
        members = (f"{run_id}|a#0", f"{run_id}|a#1")
        store.client.hdel("genloop:outbox", *members)
        store.client.zrem("genloop:live", *members)


def test_a_watch_whose_connection_redis_dropped_says_so_as_a_store_error():
    store = RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")
    try:
        with store.watch_end("r1") as watch:
            # Given the watch's own connection dropped by the server (and no other client's)
            host, port = watch._pubsub.connection._sock.getsockname()[:2]
            assert store.client.client_kill(f"{host}:{port}")
            # When it waits, Then it hears a StoreError with Redis's reason
            with pytest.raises(StoreError) as caught:
                watch.wait(5.0)
            assert str(caught.value) == "redis: Connection closed by server."
    finally:
        store.close()


def test_a_store_given_no_address_is_the_local_redis_s_first_database():
    store = RedisStateStore()  # connects at its first command, so none is sent here
    try:
        options = store.client.connection_pool.connection_kwargs
        assert (options["host"], options["port"], options["db"]) == ("127.0.0.1", 6379, 0)
    finally:
        store.close()
