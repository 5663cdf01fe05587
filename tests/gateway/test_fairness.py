"""Fair queuing: tenants take turns in front of the broker, so one tenant's small run is not
stuck behind another's large one, on the embedded back end (in memory) and on a Redis pool
(in Redis). Loose, order-based bounds; timings are in benchmarks/fairness.py."""

from __future__ import annotations

import time
import uuid

import httpx
from gateway_settings import redis_url

from genloop.sdk import Graph
from genloop.sdk.models import NodeStatus
from genloop.workers.pool.fair_queue import FairEnqueuer
from genloop.workers.pool.redis_fair_queue import RedisFairQueue
from genloop.workers.runtime.chunks import MIN_MESSAGES
from genloop.workers.stores.records import InstanceRecord


def inst(run: str, i: int) -> InstanceRecord:
    return InstanceRecord(run_id=run, node_id="n", instance_id=f"n#{i}", seq=i, queue="gpu")


def test_tenants_take_turns_within_the_window():
    # Given a window of one message and tenant a's three messages waiting before b's one
    sent: list[str] = []
    def send(chunk, delay):
        sent.append(f"{chunk[0].run_id}{chunk[0].instance_id}")
        return sent[-1]

    fair = FairEnqueuer(send, window=1, tenant_of=lambda run: run)
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    fair([inst("b", 0)])
    assert sent == ["an#0"]
    # When messages finish one by one, then b's goes second, not fourth
    for _ in range(3):
        fair.finished("gpu", sent[-1])
    assert sent == ["an#0", "bn#0", "an#1", "an#2"]
    # And a duplicate send of a waiting instance is dropped
    fair([inst("c", 0), inst("c", 0)])
    fair.finished("gpu", sent[-1])
    assert sent[-1] == "cn#0" and fair.waiting() == 0


class Clock:
    """Seconds that pass only when a test says so: a deadline in Redis is then crossed by
    moving the clock past it, not by a sleep that may or may not outlast it."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _redis_fair(sent: list[InstanceRecord], clock: Clock | None = None, **options):
    import redis

    client = redis.Redis.from_url(redis_url(0))
    fair = RedisFairQueue(client, lambda chunk, delay: sent.extend(chunk) or chunk[0].instance_id,
                          tenant_of=lambda run: run, prefix=f"test-{uuid.uuid4().hex[:8]}",
                          clock=clock or time.time, **options)
    return client, fair


def test_tenants_take_turns_in_redis_within_the_live_workers_threads():
    sent: list[InstanceRecord] = []
    clock = Clock()
    client, fair = _redis_fair(sent, clock)
    names = lambda: [f"{i.run_id}{i.instance_id}" for i in sent]  # noqa: E731
    # Given no live worker: everything waits its turn in Redis
    fair([inst("a", 0), inst("a", 1), inst("a", 2)])
    assert sent == [] and fair.waiting("gpu") == 3
    # When a worker with one thread joins, then one message is let in
    fair.join("w1", "gpu", threads=1, ttl=30)
    fair.pump("gpu")
    assert names() == ["an#0"]
    fair([inst("b", 0), inst("b", 0)])  # the duplicate is dropped
    assert fair.waiting("gpu") == 3
    # And as each finishes, the tenants take turns: b's goes second, not fourth
    for _ in range(3):
        fair.finished("gpu", sent[-1].run_id, [sent[-1].instance_id])
    assert names() == ["an#0", "bn#0", "an#1", "an#2"]
    assert sent[1].max_retries == 3 and sent[1].queue == "gpu"  # the message's options
    # And a slot whose message nobody reports on frees itself after the flight ttl, not before
    fair.finished("gpu", "a", ["n#2"])
    fair([inst("c", 0), inst("c", 1)])
    assert names()[-1] == "cn#0"
    clock.now += fair.flight_ttl - 0.1
    fair.pump("gpu")
    assert names()[-1] == "cn#0"
    clock.now += 0.2
    fair.pump("gpu")
    assert names()[-1] == "cn#1"
    # And a worker that stops beating leaves the window: with its slot free, d still waits
    fair.finished("gpu", "c", ["n#1"])
    clock.now += 30.1
    fair([inst("d", 0)])
    fair.pump("gpu")
    assert names()[-1] == "cn#1" and fair.waiting("gpu") == 1
    # (while a worker that beats again lets it in)
    fair.join("w1", "gpu", threads=1, ttl=30)
    fair.pump("gpu")
    assert names()[-1] == "dn#0"
    client.close()


def test_tenants_with_backlogs_in_redis_alternate_rather_than_drain_one_first():
    sent: list[InstanceRecord] = []
    client, fair = _redis_fair(sent)
    # Given two tenants with three messages waiting each, and no worker yet
    fair([inst("a", i) for i in range(3)])
    fair([inst("b", i) for i in range(3)])
    # When a worker with a thread for each joins
    fair.join("w1", "gpu", threads=6, ttl=30)
    fair.pump("gpu")
    # Then every message went in, the tenants taking turns (a tenant with a backlog goes to
    # the back of the ring after its turn), each tenant's own messages in the order sent
    tenants = [i.run_id for i in sent]
    assert sorted(tenants) == ["a"] * 3 + ["b"] * 3
    assert all(x != y for x, y in zip(tenants, tenants[1:], strict=False)), tenants
    for t in "ab":
        assert [i.seq for i in sent if i.run_id == t] == [0, 1, 2]
    client.close()


def _submit(url: str, key: str, n: int) -> str:
    g = Graph()
    # 100 ms an image: the large run keeps 4 threads busy for over 2 seconds
    g.add("fair-image", params={"n": n, "salt": uuid.uuid4().hex, "ms": 100}, id="gen")
    response = httpx.post(f"{url}/v1/runs", content=g.model_dump_json(),
                          headers={"Authorization": f"Bearer {key}",
                                   "Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _done(backend, run_id: str) -> int:
    return sum(i.status == NodeStatus.SUCCEEDED for i in backend.store.instances(run_id))


def test_a_small_run_finishes_before_most_of_another_tenants_large_one(stack):
    _, big_key = stack.tenant()
    _, small_key = stack.tenant()
    backend = stack.backend
    # Given another tenant's 96-image run (24 messages of 4 images) in flight
    big = _submit(stack.url, big_key, 96)
    # When a tenant submits a 1-image run just after it
    small = _submit(stack.url, small_key, 1)
    before = _done(backend, big)
    deadline = time.monotonic() + 120
    while not backend.get(small).status.terminal:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # Then it ended a turn or two later, long before the large run (FIFO order would have run
    # all of its 24 messages first; the window is the 4 worker threads)
    after = _done(backend, big)
    assert after < 24 and after - before <= 8, f"{before} -> {after} of 24 shards"
    assert backend.get(small).status == "succeeded"
    while not backend.get(big).status.terminal:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert backend.get(big).status == "succeeded"


def test_an_instance_sent_again_frees_the_slot_its_lost_message_held():
    sent: list[InstanceRecord] = []
    client, fair = _redis_fair(sent)
    # Given one slot, taken by a message whose worker died (nobody reports its end)
    fair.join("w1", "gpu", threads=1, ttl=30)
    fair([inst("a", 0)])
    fair([inst("b", 0)])
    assert [i.run_id for i in sent] == ["a"]
    # When the sweeper sends that instance again
    fair([inst("a", 0)])
    # Then it goes in at once, in the slot its lost message held, not after the slot expires
    assert [i.run_id for i in sent] == ["a", "a"]
    # And the window still holds: b waits for the re-sent message to finish
    fair.finished("gpu", "a", ["n#0"])
    assert [i.run_id for i in sent] == ["a", "a", "b"]
    client.close()


def test_a_lost_chunks_instances_sent_again_go_in_at_once_in_the_slot_it_held():
    sent: list[InstanceRecord] = []
    clock = Clock()
    client, fair = _redis_fair(sent, clock)
    # Given one slot, taken by a chunk whose worker died (nobody reports its end), and b waiting
    fair.join("w1", "gpu", threads=1, ttl=30)
    fair([inst("a", i) for i in range(2 * MIN_MESSAGES)])
    fair([inst("b", 0)])
    assert [i.instance_id for i in sent] == ["n#0", "n#1"]
    # When the sweeper sends its instances again, one by one, before the slot's deadline
    clock.now += 1
    fair.resend([inst("a", 1), inst("a", 0)])
    # Then the slot the chunk held is free at once, not after it expires, and the next turn
    # (b's) takes it; the window still holds one message
    assert [(i.run_id, i.instance_id) for i in sent[2:]] == [("b", "n#0")]
    assert fair.waiting("gpu") == MIN_MESSAGES - 1 + 2
    client.close()


def test_a_chunk_of_a_large_release_takes_one_slot_and_arrives_whole():
    import redis

    client = redis.Redis.from_url(redis_url(0))
    chunks: list[list[InstanceRecord]] = []
    fair = RedisFairQueue(client, lambda chunk, delay: chunks.append(list(chunk)) or "id",
                          tenant_of=lambda run: run, prefix=f"test-{uuid.uuid4().hex[:8]}")
    fair.join("w1", "gpu", threads=1, ttl=30)
    # When a release large enough to be chunked (two instances a message) meets one slot
    fair([inst("a", i) for i in range(2 * MIN_MESSAGES)])
    # Then one chunk goes in, whole, with its instances' fields
    assert [[i.instance_id for i in c] for c in chunks] == [["n#0", "n#1"]]
    assert chunks[0][1].seq == 1 and chunks[0][1].queue == "gpu"
    assert fair.waiting("gpu") == MIN_MESSAGES - 1
    # And when that message ends, its slot lets the next chunk in
    fair.finished("gpu", "a", ["n#0", "n#1"])
    assert [i.instance_id for i in chunks[-1]] == ["n#2", "n#3"]
    client.close()


def test_a_member_written_before_chunks_still_comes_out_as_its_instance():
    from genloop.workers.pool.redis_fair_queue import _chunk

    one = inst("a", 7)
    assert _chunk(one.model_dump_json().encode()) == [one]
    assert _chunk(f"[{one.model_dump_json()}]".encode()) == [one]


def _lanes_in_turn(send_to, finish) -> list[str]:
    """Drives a fair queue of one slot, taken by an interactive message (``x``): ten campaign
    runs (``c*``, batch lane) with two messages each wait, then a loop (``loop``) with six;
    returns the lane of each message let in as the one before it finishes, in order."""
    send_to([inst("x", 0)])
    for c in range(10):
        for i in range(2):
            send_to([inst(f"c{c}", i)])
    for i in range(6):
        send_to([inst("loop", i)])
    order = []
    for _ in range(26):
        order.append(finish())
    return ["B" if run.startswith("c") else "I" for run in order]


def test_the_interactive_lane_goes_first_and_the_batch_lane_keeps_one_slot_in_four():
    # Given one slot, a campaign of ten runs waiting in the batch lane, and a loop submitted
    # after it (each run its own tenant, as runs without a namespace are)
    sent: list[tuple[str, str]] = []

    def send(chunk, delay):
        sent.append((chunk[0].run_id, chunk[0].instance_id))
        return f"{chunk[0].run_id}{chunk[0].instance_id}"

    fair = FairEnqueuer(send, window=1, tenant_of=lambda run: run,
                        in_batch_lane=lambda run: run.startswith("c"))

    def finish() -> str:
        run, instance = sent[-1]
        fair.finished("gpu", f"{run}{instance}")
        return sent[-1][0]

    # When messages finish one by one
    lanes = _lanes_in_turn(fair, finish)
    # Then the loop's messages take three slots of every four, not one in eleven turns, and
    # the campaign keeps the fourth; with the loop done, the campaign has them all
    assert lanes == ["I", "I", "I", "B", "I", "I", "I"] + ["B"] * 19
    assert sent[0][0] == "x" and len(sent) == 27 and fair.waiting() == 0


def test_the_interactive_lane_goes_first_in_redis_too():
    sent: list[InstanceRecord] = []
    client, fair = _redis_fair(sent, in_batch_lane=lambda run: run.startswith("c"))
    fair.join("w1", "gpu", threads=1, ttl=30)

    def finish() -> str:
        fair.finished("gpu", sent[-1].run_id, [sent[-1].instance_id])
        return sent[-1].run_id

    lanes = _lanes_in_turn(fair, finish)
    assert lanes == ["I", "I", "I", "B", "I", "I", "I"] + ["B"] * 19
    assert sent[0].run_id == "x" and len(sent) == 27 and fair.waiting("gpu") == 0
    client.close()
