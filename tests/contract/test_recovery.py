"""The sweeper's recovery on every store: what it re-sends, what it must leave alone, and that
one unreadable record cannot stop it."""

from __future__ import annotations

import time

from wait_util import until

from genloop.sdk.models import NodeStatus
from genloop.workers.metrics.prometheus import metrics
from genloop.workers.ops.registry import OpRegistry
from genloop.workers.runtime.recovery import sweep
from genloop.workers.runtime.scheduler import Scheduler
from genloop.workers.stores import InstanceRecord, NodeRecord, RunRecord, RunSpecRecord
from genloop.workers.stores.redis import RedisStateStore


class Sent(list):
    """What the scheduler sent (instance ids) and with what delays (recovery sends at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: set[float] = set()

    def __call__(self, instances, delay):
        self.extend(i.instance_id for i in instances)
        self.delays.add(delay)


def _scheduler(store, backlog: dict[str, int] | None = None):
    """A scheduler whose queues hold ``backlog`` messages waiting their turn (by queue)."""
    sent = Sent()
    return Scheduler(store, OpRegistry(), sent,
                     backlog=lambda queue: (backlog or {}).get(queue, 0)), sent


def _resends(reason: str) -> float:
    return metrics().registry.get_sample_value("genloop_sweeper_resends_total",
                                               {"reason": reason}) or 0.0


#: The sweeps' grace: an unfinished instance nothing has written for this long is recovered.
GRACE = 0.01


def _aged(store, *ids: str) -> None:
    """Wait until instances ``ids`` of run r1 have gone untouched for the grace, as the store
    itself reports it, so the sweep that follows judges them old (a sleep could come short of
    that on one clock, or leave the check vacuous)."""
    until(lambda: set(ids) <= {i for _, i in store.stale_instances(older_than=GRACE)},
          f"{ids} untouched for {GRACE}s")


def _create(store, n=3):
    run = RunRecord(id="r1", spec_hash="h", pending_nodes=1, created_at=time.time())
    insts = [InstanceRecord(run_id="r1", instance_id=f"a#{i}", node_id="a", seq=i)
             for i in range(n)]
    store.create_run(run, RunSpecRecord(spec={}, graph={}),
                     [NodeRecord(run_id="r1", node_id="a", pending_instances=n)], insts)
    store.clear_outbox(store.outbox())


def _set(store, instance_id, status, key=None):
    with store.transaction("r1") as tx:
        inst = tx.instance(instance_id)
        inst.status, inst.result_key = status, key
        tx.put_instance(inst)


def _corrupt(store, instance_id, doc='{"run_id": "r1"'):
    """Write ``doc`` (by default no JSON at all) as the record of instance ``instance_id`` of run
    r1, past the store's own checks."""
    if isinstance(store, RedisStateStore):
        store.client.hset(store.keys.instances("r1"), instance_id, doc)
    else:
        store._reader().conn.execute("UPDATE instances SET doc = ? WHERE instance_id = ?",
                                     (doc, instance_id))


def _with_params(params: str) -> str:
    """Instance a#1's record, its params the JSON members ``params`` (which may hold what JSON
    itself does not: ``Infinity``, ``NaN``)."""
    return ('{"run_id": "r1", "instance_id": "a#1", "node_id": "a", "seq": 1, '
            f'"params": {{{params}}}}}')


def test_a_completion_between_reading_the_instance_and_its_lease_is_not_a_takeover(store):
    # Given a running instance read by the sweeper just before its completion commits, which
    # stores the result and releases the lease in one step (a 10-prompt 120-draft benchmark
    # re-sent 2-13 finished instances so, counted as lease takeovers), and after it one whose
    # holder died
    _create(store, n=2)
    scheduler, sent = _scheduler(store)
    _set(store, "a#0", NodeStatus.RUNNING, key="k0")
    _set(store, "a#1", NodeStatus.RUNNING, key="k1")
    assert store.claim("k0", "holder", ttl=30)
    _aged(store, "a#0", "a#1")
    lease_remaining = store.lease_remaining

    def completed_meanwhile(key):
        if key == "k0":
            _set(store, "a#0", NodeStatus.SUCCEEDED, key="k0")
            store.release("k0", "holder")
        return lease_remaining(key)

    store.lease_remaining = completed_meanwhile
    # When the sweeper looks; Then it takes over only the dead holder's
    assert sweep(scheduler, older_than=0, grace=GRACE) == 1
    assert sent == ["a#1"]


def test_running_without_a_live_lease_is_resent_a_live_holder_is_not(store):
    _create(store)
    scheduler, sent = _scheduler(store)
    _set(store, "a#0", NodeStatus.RUNNING, key="k0")
    _set(store, "a#1", NodeStatus.RUNNING, key="k1")
    _set(store, "a#2", NodeStatus.SUCCEEDED)
    assert store.claim("k0", "alive", ttl=30)  # a#1's holder died: its lease is gone
    _aged(store, "a#0", "a#1")

    assert sweep(scheduler, older_than=0, grace=GRACE) == 1
    assert sent == ["a#1"]

    store.release("k0", "alive")  # the holder ends without completing (it died, too)
    _aged(store, "a#0", "a#1")
    sent.clear()
    sweep(scheduler, older_than=0, grace=GRACE)
    assert sent == ["a#0", "a#1"]


def test_queued_instances_wait_for_their_queues_backlog_then_are_resent(store):
    _create(store, n=2)
    waiting, sent = _scheduler(store, backlog={"cpu": 1, "gpu": 0})  # their queue is cpu
    _aged(store, "a#0", "a#1")

    assert sweep(waiting, older_than=0, grace=GRACE) == 0  # their turn has not come
    assert store.stale_instances(older_than=2) == []  # seen: looked at again a grace later

    drained, sent = _scheduler(store, backlog={"gpu": 1})
    _aged(store, "a#0", "a#1")
    assert sweep(drained, older_than=0, grace=GRACE) == 2
    assert sorted(sent) == ["a#0", "a#1"] and sent.delays == {0.0}
    assert sweep(drained, older_than=0, grace=10) == 0  # re-sent ones wait another grace


def test_a_resent_instance_is_looked_at_again_only_a_grace_later(store):
    _create(store, n=1)
    scheduler, sent = _scheduler(store)
    until(lambda: store.stale_instances(older_than=0.6) != [], "a#0 untouched for 0.6 s")

    assert sweep(scheduler, older_than=0, grace=0.5) == 1
    assert sweep(scheduler, older_than=0, grace=0.5) == 0  # the re-send touched it


def test_a_waiting_or_live_instance_does_not_stop_the_sweep_judging_those_after_it(store):
    # Given, oldest first: a queued instance whose queue has a backlog, a running one whose
    # holder is alive, and a running one whose lease ended
    _create(store, n=3)
    scheduler, sent = _scheduler(store, backlog={"cpu": 3})
    _set(store, "a#1", NodeStatus.RUNNING, key="k1")
    _set(store, "a#2", NodeStatus.RUNNING, key="k2")
    assert store.claim("k1", "alive", ttl=30)
    _aged(store, "a#0", "a#1", "a#2")

    # When the sweeper looks, then the last is taken over all the same
    assert sweep(scheduler, older_than=0, grace=GRACE) == 1
    assert sent == ["a#2"]


def test_each_resend_is_counted_under_its_reason_and_the_sweep_returns_them_all(store):
    # Given an outbox entry (a#2, queued and untouched too), a running instance whose lease
    # ended (a#0) and a queued one whose message was lost (a#1)
    _create(store, n=3)
    scheduler, sent = _scheduler(store)
    _set(store, "a#0", NodeStatus.RUNNING, key="k0")
    with store.transaction("r1") as tx:
        tx.add_outbox(["a#2"])
    _aged(store, "a#0", "a#1", "a#2")
    before = {r: _resends(r) for r in ("outbox", "lease_ended", "message_lost")}

    assert sweep(scheduler, older_than=0, grace=GRACE) == 4

    after = {r: _resends(r) - before[r] for r in before}
    assert after == {"outbox": 1, "lease_ended": 1, "message_lost": 2}
    assert sorted(sent) == ["a#0", "a#1", "a#2", "a#2"] and sent.delays == {0.0}


def test_a_node_mark_for_a_node_that_is_gone_is_dropped(store):
    _create(store, n=1)
    scheduler, _ = _scheduler(store)
    with store.transaction("r1") as tx:
        tx.add_outbox(["@gone"])

    sweep(scheduler, older_than=0)

    assert store.outbox() == []


def test_an_unreadable_record_is_quarantined_and_the_sweep_goes_on(store):
    _create(store)
    scheduler, sent = _scheduler(store)
    _corrupt(store, "a#1")
    with store.transaction("r1") as tx:
        tx.add_outbox(["a#1", "a#2"])
    _aged(store, "a#0", "a#2")

    sweep(scheduler, older_than=0, grace=GRACE)

    assert sorted(sent) == ["a#0", "a#2", "a#2"]  # a#2 from the outbox and as untouched
    assert store.outbox() == []
    (event,) = [e for e in store.events("r1") if e.type == "instance.quarantined"]
    assert event.instance_id == "a#1" and "ValidationError" in event.error
    sent.clear()
    _aged(store, "a#0", "a#2")
    sweep(scheduler, older_than=0, grace=GRACE)
    assert "a#1" not in sent


def test_a_record_holding_values_no_spec_may_hold_is_quarantined_like_admission_says(store):
    from genloop.sdk.validation import bad_values

    # Given a record that parses but carries Infinity in its params (written by hand, or by a
    # version before admission refused them)
    _create(store, n=2)
    scheduler, sent = _scheduler(store)
    _corrupt(store, "a#1", _with_params('"threshold": Infinity, "weight": NaN'))
    _aged(store, "a#0")
    # When the sweeper looks at it, then it is quarantined with the admission's own words
    sweep(scheduler, older_than=0, grace=GRACE)
    assert sent == ["a#0"]
    (event,) = [e for e in store.events("r1") if e.type == "instance.quarantined"]
    assert event.error == ("ValueError: params.threshold: inf is not a finite number; "
                           "params.weight: nan is not a finite number")
    assert bad_values({"params": {"threshold": float("inf")}}) == [
        ("params.threshold", "inf is not a finite number")]


def test_a_quarantine_keeps_the_first_2000_characters_of_its_reason(store):
    # Given a record whose reason to be quarantined runs to some 4,000 characters
    _create(store, n=2)
    scheduler, sent = _scheduler(store)
    _corrupt(store, "a#1", _with_params(", ".join(f'"p{i:03}": Infinity' for i in range(100))))
    _aged(store, "a#0")
    # When the sweeper quarantines it, Then its event keeps the reason's first 2,000 characters
    sweep(scheduler, older_than=0, grace=GRACE)
    (event,) = [e for e in store.events("r1") if e.type == "instance.quarantined"]
    full = "ValueError: " + "; ".join(f"params.p{i:03}: inf is not a finite number"
                                      for i in range(100))
    assert event.error == full[:2000]
