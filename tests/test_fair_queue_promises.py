"""The fair queues' smaller promises, each with a test that fails when it breaks (issue #49's
mutation run over ``pool/fair_queue.py`` and ``pool/redis_fair_queue.py``): delayed sends,
duplicates, counts, re-sends of chunks, and a worker process's part (its threads in the window,
the slots of the messages it runs). Turn order itself is in ``gateway/test_fairness.py``."""

from __future__ import annotations

import json
import threading
import time
import uuid

import dramatiq
import dramatiq.brokers.redis
import pytest
import redis
from dramatiq import Message
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker
from redis_util import redis_url
from wait_util import until

from genloop.sdk import Client, Graph
from genloop.workers.backends.catalogue import publish
from genloop.workers.ops import default_registry
from genloop.workers.pool.fair_queue import FairEnqueuer, FairRelease
from genloop.workers.pool.redis_fair_queue import RedisFairQueue, RedisFairWorker
from genloop.workers.pool.routing import held_images_key, held_since_key, routed_queue
from genloop.workers.runtime.chunks import chunk_name
from genloop.workers.stores.records import InstanceRecord
from genloop.workers.stores.redis_keys import PoolKeys


def inst(run: str, i: int, queue: str = "gpu") -> InstanceRecord:
    return InstanceRecord(run_id=run, node_id="n", instance_id=f"n#{i}", seq=i, queue=queue)


# -- in memory (the embedded runtime) ---------------------------------------------------------

class Sent:
    """What a fair queue sent: (run and instance, delay), in order; a message's id is its
    first instance's name."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []

    def __call__(self, chunk, delay: float) -> str:
        self.log.append((f"{chunk[0].run_id}{chunk[0].instance_id}", delay))
        return self.log[-1][0]


def test_a_delayed_send_goes_out_at_once_with_its_delay_and_holds_a_slot():
    sent = Sent()
    fair = FairEnqueuer(sent, window=1, tenant_of=lambda run: run)
    # A re-look after half a second is sent now, with its delay (the broker holds it)
    fair([inst("a", 0)], delay=0.5)
    assert sent.log == [("an#0", 0.5)]
    # It holds the window's one slot: the next message waits until it ends, then goes at once
    fair([inst("b", 0)])
    assert sent.log == [("an#0", 0.5)] and fair.waiting("gpu") == 1
    fair.finished("gpu", "an#0")
    assert sent.log == [("an#0", 0.5), ("bn#0", 0.0)]


def test_a_message_let_in_at_its_send_goes_without_delay():
    sent = Sent()
    fair = FairEnqueuer(sent, window=2, tenant_of=lambda run: run)
    fair([inst("a", 0)])
    assert sent.log == [("an#0", 0.0)]


def test_a_duplicate_ahead_of_new_instances_in_one_send_drops_only_itself():
    sent = Sent()
    fair = FairEnqueuer(sent, window=1, tenant_of=lambda run: run)
    fair([inst("a", 0), inst("a", 1)])  # a#1 waits
    fair([inst("a", 1), inst("a", 2)])  # the sweeper sends a#1 again, with a#2 behind it
    assert fair.waiting("gpu") == 2
    fair.finished("gpu", "an#0")
    fair.finished("gpu", "an#1")
    assert [name for name, _ in sent.log] == ["an#0", "an#1", "an#2"]


def test_two_runs_with_the_same_instance_ids_both_wait_and_both_go():
    sent = Sent()
    fair = FairEnqueuer(sent, window=1, tenant_of=lambda run: run)
    fair([inst("x", 0)])  # takes the slot
    fair([inst("a", 0)])
    fair([inst("b", 0)])  # same instance id as a's, another run: not a duplicate
    assert fair.waiting() == 2
    fair.finished("gpu", "xn#0")
    fair.finished("gpu", sent.log[-1][0])
    assert sorted(name for name, _ in sent.log) == ["an#0", "bn#0", "xn#0"]


def test_waiting_counts_by_queue_and_in_all():
    fair = FairEnqueuer(Sent(), window=1, tenant_of=lambda run: run)
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    fair([inst("b", 0, "cpu"), inst("b", 1, "cpu")])
    assert (fair.waiting("gpu"), fair.waiting("cpu"), fair.waiting("other"),
            fair.waiting()) == (2, 1, 0, 3)


def test_the_end_of_a_message_it_never_sent_changes_nothing():
    sent = Sent()
    fair = FairEnqueuer(sent, window=1, tenant_of=lambda run: run)
    fair.finished("gpu", "unknown")  # a queue it has sent nothing on
    fair([inst("a", 0), inst("a", 1)])
    fair.finished("gpu", "unknown")  # a message that is not one of its
    assert sent.log == [("an#0", 0.0)] and fair.waiting("gpu") == 1


def test_a_window_of_no_message_is_refused():
    with pytest.raises(ValueError, match="^window must be at least 1$"):
        FairEnqueuer(Sent(), window=0, tenant_of=lambda run: run)


def test_a_message_that_ends_or_is_skipped_frees_its_slot_for_the_next():
    sent = Sent()
    fair = FairEnqueuer(sent, window=1, tenant_of=lambda run: run)
    release = FairRelease(fair)
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    release.after_process_message(None, proxy("gpu", "a", "n#0", message_id="an#0"))
    # a retried message comes back on the delay queue; its slot is its queue's all the same
    release.after_skip_message(None, proxy("gpu.DQ", "a", "n#1", message_id="an#1"))
    assert [name for name, _ in sent.log] == ["an#0", "an#1", "an#2"]


# -- in Redis (a pool) -------------------------------------------------------------------------

@pytest.fixture
def client():
    c = redis.Redis.from_url(redis_url())
    yield c
    c.close()


def redis_fair(client, sent: list[tuple[InstanceRecord, float]], **options) -> RedisFairQueue:
    def send(chunk, delay):
        sent.extend((i, delay) for i in chunk)
        return chunk[0].instance_id
    options.setdefault("prefix", f"test-{uuid.uuid4().hex[:8]}")
    return RedisFairQueue(client, send, tenant_of=lambda run: run, **options)


def test_a_default_fair_queue_times_a_model_s_waiting_work_where_routing_reads_it(client):
    # Given a fair queue with the pool's default prefix, and no worker in its window
    queue = f"q{uuid.uuid4().hex[:8]}"
    routed = routed_queue(queue, "sim")
    fair = RedisFairQueue(client, lambda chunk, delay: "", tenant_of=lambda run: run,
                          queue_of=lambda chunk: routed)
    try:
        # When a model's instance is sent, it waits
        fair([inst("a", 0, queue)])
        # Then routing, reading the pool's default keys, sees how long it has waited
        assert client.zcard(held_since_key(PoolKeys().p, routed)) == 1
    finally:
        client.delete(*client.keys(f"genloop:fair:{queue}:*"))


def test_the_images_a_model_s_waiting_work_holds_are_counted_until_it_is_let_in(client):
    # Given a fair queue with no worker in its windows, and two models' queues
    queue = f"q{uuid.uuid4().hex[:8]}"
    sim, other = routed_queue(queue, "sim"), routed_queue(queue, "other")
    sent: list = []
    fair = RedisFairQueue(client, lambda chunk, delay: sent.append(chunk) or "",
                          tenant_of=lambda run: run,
                          queue_of=lambda chunk: sim if chunk[0].node_id == "n" else other)
    p = PoolKeys().p
    try:
        # When three instances of 4, 8 and 2 images wait (two runs, so two messages of sim's)
        fair([inst("a", 0, queue).model_copy(update={"expected_items": 4}),
              inst("b", 0, queue).model_copy(update={"expected_items": 8}),
              inst("c", 0, queue).model_copy(update={"node_id": "m", "expected_items": 2})])
        # Then each model's waiting images are counted apart
        assert int(client.get(held_images_key(p, sim))) == 12
        assert int(client.get(held_images_key(p, other))) == 2
        assert fair.waiting(queue) == 3 and fair.routed(queue) == sorted([sim, other])
        # And a message let in through the model's window takes its images off, the last one
        # the count itself
        fair.join("w", sim, threads=1, ttl=30)
        fair.pump(sim)
        left = {"a": 8, "b": 4}[sent[0][0].run_id]
        assert int(client.get(held_images_key(p, sim))) == left
        fair.join("w", sim, threads=2, ttl=30)
        fair.pump(sim)
        assert len(sent) == 2 and not client.exists(held_images_key(p, sim))
        assert not client.exists(f"{p}:fair:{sim}:count") and fair.waiting(queue) == 1
    finally:
        client.delete(*client.keys(f"genloop:fair:{queue}*"))


@pytest.mark.parametrize("window", ["its queue's", "its model's"])
def test_a_re_send_frees_every_stale_slot_of_the_chunks_that_carried_it(client, window):
    sent: list[tuple[InstanceRecord, float]] = []
    # (a model's window: the queue's messages routed to the model's own queue)
    model = routed_queue("gpu", "sim") if window == "its model's" else "gpu"
    fair = redis_fair(client, sent, queue_of=lambda chunk: model)
    fair.join("w1", model, threads=100, ttl=30)
    # Given a release of 48 instances, in flight as 16 chunks of 3
    lost = [inst("a", i) for i in range(48)]
    fair(lost)
    flight = fair.key(model, "flight")
    assert client.zcard(flight) == 16
    # When the sweeper sends one instance of each chunk again (nobody works on them)
    again = lost[::3]
    fair.resend(again)
    # Then none of the 16 chunks' slots holds the window any more: the 16 re-sent messages'
    # (one instance each) do
    held = {m.decode() for m in client.zrange(flight, 0, -1)}
    assert held == {chunk_name("a", [i.instance_id]) for i in again}
    assert len(sent) == 48 + 16


def test_renewing_the_slot_of_a_message_that_already_ended_takes_no_slot(client):
    # Given a window of one slot, whose message ended after a beat read it as running
    sent: list[tuple[InstanceRecord, float]] = []
    fair = redis_fair(client, sent)
    fair.join("w", "gpu", threads=1, ttl=30)
    fair([inst("a", 0)])
    fair.finished("gpu", "a", ["n#0"])
    # When that beat renews the slot
    fair.running("gpu", [chunk_name("a", ["n#0"])], ttl=30)
    # Then the slot stays free: the next message goes at once
    fair([inst("b", 0)])
    assert [i.run_id for i, _ in sent] == ["a", "b"]


def test_a_waiting_message_holds_only_what_its_message_needs(client):
    fair = redis_fair(client, [])
    fair([inst("a", 0).model_copy(update={"expected_items": 4})])  # no worker: it waits
    payload = client.hget(fair.key("gpu", "payload"), chunk_name("a", ["n#0"]))
    assert set(json.loads(payload)[0]) == {"run_id", "instance_id", "node_id", "seq", "queue",
                                           "max_retries", "min_backoff", "max_backoff"}


def test_a_re_send_with_a_delay_goes_out_with_it(client):
    sent: list[tuple[InstanceRecord, float]] = []
    fair = redis_fair(client, sent)
    fair.resend([inst("a", 0)], delay=0.5)  # no worker in the window: it goes all the same
    assert [(i.instance_id, delay) for i, delay in sent] == [("n#0", 0.5)]


def test_a_message_waiting_since_before_chunks_is_still_taken(client):
    # Given a message written as one instance's JSON object (before chunks), read as text
    texts = redis.Redis.from_url(redis_url(), decode_responses=True)
    sent: list[tuple[InstanceRecord, float]] = []
    fair = redis_fair(texts, sent)
    old = inst("a", 0)
    base = f"{fair.prefix}:fair:gpu"
    member = chunk_name("a", ["n#0"])
    texts.sadd(f"{base}:held", member)
    texts.hset(f"{base}:payload", member, old.model_dump_json())
    texts.rpush(f"{base}:t:a", member)
    texts.lpush(f"{base}:ring", "a")
    # When a worker joins the window
    fair.join("w1", "gpu", threads=1, ttl=30)
    fair.pump("gpu")
    # Then it is sent as the one instance it is, without delay
    assert [(i.run_id, i.instance_id, delay) for i, delay in sent] == [("a", "n#0", 0.0)]
    texts.close()


# -- a worker process's part --------------------------------------------------------------------

def proxy(queue: str, run_id: str, instance_id: str, actor: str = "genloop_run",
          message_id: str | None = None) -> MessageProxy:
    message = Message(queue_name=queue, actor_name=actor, args=(run_id, instance_id), kwargs={},
                      options={})
    if message_id is not None:
        message = message.copy(message_id=message_id)
    return MessageProxy(message)


def workers_on(client, fair: RedisFairQueue, queue: str) -> list[str]:
    return [m.decode() for m in client.zrange(fair.key(queue, "workers"), 0, -1)]


def two_beats(client, fair: RedisFairQueue, member: str, queue: str = "gpu") -> None:
    """Until the worker ``member`` (``<id>:<threads>``) has beaten twice more: each beat moves
    its window share's deadline (a sleep of a few beats passed without any on a stalled
    machine)."""
    def deadline() -> float:
        return client.zscore(fair.key(queue, "workers"), member) or 0.0

    for _ in range(2):
        until(lambda before=deadline(): deadline() > before, "the worker's next beat")


@pytest.fixture
def broker():
    b = StubBroker()
    for queue in ("gpu", routed_queue("gpu", "sim"), "cpu"):
        b.declare_queue(queue)
    yield b
    b.close()


def test_a_worker_counts_its_threads_into_each_queue_it_takes_and_leaves_when_it_stops(
        client, broker):
    fair = redis_fair(client, [])
    middleware = RedisFairWorker(fair, "genloop", heartbeat=0.05)
    # When a worker with 3 threads boots on gpu, a model's routed gpu queue, and cpu
    middleware.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=3))
    # Then its threads count once in each queue's window, the model's its own (and no delay
    # queue has one)
    sim = routed_queue("gpu", "sim")
    until(lambda: all(workers_on(client, fair, q) == [f"{middleware.id}:3"]
                      for q in ("gpu", sim, "cpu")), "the worker to join the windows")
    assert not client.keys(f"{fair.prefix}:fair:*.DQ:*")
    # And when it stops, it leaves them at once
    middleware.before_worker_shutdown(broker, None)
    assert all(workers_on(client, fair, q) == [] for q in ("gpu", sim, "cpu"))


def test_workers_count_apart_and_a_dead_one_leaves_the_window_within_a_few_beats(
        client, broker):
    sent: list[tuple[InstanceRecord, float]] = []
    fair = redis_fair(client, sent)
    first, second = (RedisFairWorker(fair, "genloop", heartbeat=0.1) for _ in range(2))
    for middleware in (first, second):
        middleware.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=1))
    until(lambda: len(workers_on(client, fair, "gpu")) == 2, "two workers counted apart")
    beats = [t for t in threading.enumerate() if t.name == "genloop-fair"]
    assert len(beats) >= 2 and all(t.daemon for t in beats)  # no beat keeps a process alive
    # Given a message running on each worker (their beats keep the slots), a third waiting
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    taken = client.zscore(fair.key("gpu", "flight"), chunk_name("a", ["n#0"]))
    first.before_process_message(broker, proxy("gpu", "a", "n#0"))
    second.before_process_message(broker, proxy("gpu", "a", "n#1"))
    until(lambda: client.zscore(fair.key("gpu", "flight"), chunk_name("a", ["n#0"]))
          < taken, "the first worker's beat to keep its slot")
    assert len(sent) == 2
    # When the first dies without leaving (its beat stops), then its share of the window goes
    # on its own (kept three beats at a time)
    first._stop.set()
    until(lambda: workers_on(client, fair, "gpu") == [f"{second.id}:1"],
          "the dead worker to leave the window", timeout=3.0)
    # And so does its running message's slot: once the second's message ends, the window of
    # one lets the waiting message in
    second.after_process_message(broker, proxy("gpu", "a", "n#1"))
    until(lambda: len(sent) == 3, "the dead worker's slot to free", timeout=3.0)
    second.before_worker_shutdown(broker, None)


def test_a_worker_restricted_to_some_queues_counts_only_in_theirs(client, broker):
    fair = redis_fair(client, [])
    middleware = RedisFairWorker(fair, "genloop", heartbeat=0.05)
    middleware.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=2,
                                                         queues={"cpu"}))
    until(lambda: workers_on(client, fair, "cpu") == [f"{middleware.id}:2"],
          "the worker to join the window")
    assert workers_on(client, fair, "gpu") == []
    middleware.before_worker_shutdown(broker, None)


def test_a_running_message_keeps_its_slot_and_frees_it_for_the_next_when_it_ends(
        client, broker):
    sent: list[tuple[InstanceRecord, float]] = []
    fair = redis_fair(client, sent, flight_ttl=1.0)
    middleware = RedisFairWorker(fair, "genloop", heartbeat=0.2)  # slots kept 0.6 s a beat
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    # Given a worker with one thread, the window's one slot: its beat lets a#0 in
    middleware.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=1))
    until(lambda: len(sent) == 1, "the worker's beat to let a#0 in")
    flight = fair.key("gpu", "flight")
    first = chunk_name("a", ["n#0"])
    taken = client.zscore(flight, first)
    # When a#0's message runs on this worker
    running = proxy("gpu", "a", "n#0")
    middleware.before_process_message(broker, running)
    # Then the worker's beats move its slot's deadline on, past the one it was taken with
    until(lambda: (client.zscore(flight, first) or 0) > taken + 0.3,
          "the beat to move the running slot's deadline")
    assert [i.instance_id for i, _ in sent] == ["n#0"]
    # When it ends, the next one goes in at once, and the ended one's slot is not renewed
    middleware.after_process_message(broker, running)
    assert [i.instance_id for i, _ in sent] == ["n#0", "n#1"]
    two_beats(client, fair, f"{middleware.id}:1")
    assert client.zscore(flight, first) is None
    assert not middleware._running  # (white box) nor kept in the worker's map of running ones
    # And a skipped message frees its slot too
    skipped = proxy("gpu", "a", "n#1")
    middleware.before_process_message(broker, skipped)
    middleware.after_skip_message(broker, skipped)
    assert [i.instance_id for i, _ in sent] == ["n#0", "n#1", "n#2"]
    middleware.before_worker_shutdown(broker, None)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_a_message_waiting_on_its_dramatiq_queue_keeps_its_slot_past_the_flight_ttl(client):
    # Given a Redis broker, a fair queue that sends to it, and one worker thread in the window
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    broker = dramatiq.brokers.redis.RedisBroker(client=client, namespace=namespace)
    broker.declare_queue("gpu")
    clock = Clock()

    def send(chunk, delay):
        message = Message(queue_name="gpu", actor_name="genloop_run",
                          args=(chunk[0].run_id, [i.instance_id for i in chunk]), kwargs={},
                          options={})
        return broker.enqueue(message).message_id

    fair = RedisFairQueue(client, send, tenant_of=lambda run: run, flight_ttl=1.0,
                          clock=clock, prefix=namespace)
    middleware = RedisFairWorker(fair, "genloop", heartbeat=0.05)
    flight, first = fair.key("gpu", "flight"), chunk_name("a", ["n#0"])
    try:
        middleware.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=1))
        until(lambda: workers_on(client, fair, "gpu") == [f"{middleware.id}:1"],
              "the worker to join the window")
        # a#0 is let in and waits on the queue (its one thread busy elsewhere), a#1 is held
        fair([inst("a", 0), inst("a", 1)])
        assert client.llen(PoolKeys.dramatiq_queue(namespace, "gpu")) == 1
        assert fair.waiting("gpu") == 1
        # When it waits past the flight TTL
        clock.now += 2 * fair.flight_ttl
        # Then the worker's beats keep its slot, and a#1 still waits its turn
        until(lambda: (client.zscore(flight, first) or 0) > clock.now,
              "the beat to keep the waiting message's slot")
        assert fair.waiting("gpu") == 1
        # And a message that never reached Dramatiq (its sender died) frees its slot in time:
        # once a#0 is gone from the broker, its slot expires and a#1 is let in
        broker.flush("gpu")
        clock.now += 2 * fair.flight_ttl
        until(lambda: fair.waiting("gpu") == 0, "a lost message's slot to expire")
        assert client.zscore(flight, chunk_name("a", ["n#1"])) is not None
    finally:
        middleware.before_worker_shutdown(broker, None)
        broker.flush_all()


def test_another_actor_s_message_takes_no_part_in_the_window(client, broker):
    sent: list[tuple[InstanceRecord, float]] = []
    fair = redis_fair(client, sent)
    middleware = RedisFairWorker(fair, "genloop", heartbeat=0.05)
    fair.join("w0", "gpu", threads=1, ttl=30)
    fair([inst("a", 0), inst("a", 1)])
    # A message of someone else's actor ending is not one of the window's: a#1 still waits
    middleware.after_process_message(broker, proxy("gpu", "a", "n#0", actor="other_actor"))
    assert [i.instance_id for i, _ in sent] == ["n#0"]


def test_a_tenant_s_interactive_run_overtakes_its_own_batch_backlog_in_the_fair_queue(
        client, tmp_path):
    # Given a tenant's batch run of six messages waiting in the pool's fair queue (no worker)
    prefix = f"lanes-{uuid.uuid4().hex[:8]}"
    publish(client, default_registry, ["gpu", "cpu"], prefix, models={"tiny": "tiny"})
    try:
        with Client.connect(redis_url(), prefix=prefix,
                            artifacts=f"file://{tmp_path}") as sender:
            backlog = Graph(namespace="acme", priority="batch")
            backlog.generate("ads", model="tiny", n=6, seed=0, shard_size=1)
            sender.submit(backlog)
            # When the same tenant's interactive run is submitted after it
            loop = Graph(namespace="acme")
            loop.generate("a red circle", model="tiny", n=1, seed=0)
            run = sender.submit(loop)
        # Then the first slot that opens takes the interactive run's message: each lane is a
        # flow of its own, and one with nothing waiting goes first
        sent: list[tuple[InstanceRecord, float]] = []
        fair = redis_fair(client, sent, prefix=prefix)
        queue = routed_queue("gpu", "tiny")
        assert fair.waiting("gpu") == 7
        fair.join("w", queue, threads=1, ttl=30)
        fair.pump(queue)
        assert [i.run_id for i, _ in sent] == [run.id]
    finally:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
