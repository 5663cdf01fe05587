"""Chunked delivery (genloop.workers.runtime.chunks): a large release travels several instances to a
message, and each instance keeps its own execution, retries and failure."""

from __future__ import annotations

from itertools import pairwise

import dramatiq
import pytest
from dramatiq.middleware import Middleware
from genloop_test_ops import executions

from genloop.sdk import Graph, Loop, RunStatus
from genloop.sdk.errors import StoreError
from genloop.workers.runtime import executor
from genloop.workers.runtime.chunks import (
    MAX_CHUNK,
    MIN_MESSAGES,
    TOGETHER_IMAGES,
    chunked,
    instances_of,
    message_args,
)
from genloop.workers.runtime.executor import TOGETHER_BELOW
from genloop.workers.stores.records import InstanceRecord


class MessageLog(Middleware):
    """The instance ids of every genloop message a worker starts."""

    def __init__(self) -> None:
        self.messages: list[list[str]] = []

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.Message) -> None:
        if message.actor_name.startswith("genloop.execute."):
            self.messages.append(instances_of(message.args)[1])


def _inst(run: str, i: int, queue: str = "cpu") -> InstanceRecord:
    return InstanceRecord(run_id=run, instance_id=f"n{i}#0", node_id=f"n{i}", seq=0, queue=queue)


def test_a_message_names_one_instance_by_its_id_and_a_chunk_by_a_list():
    one, two = ([InstanceRecord(run_id="r", node_id="n", instance_id=f"n#{i}", seq=i)
                 for i in range(k)] for k in (1, 2))
    # one id alone, as messages were before chunks (a worker of that version reads them)
    assert message_args(one) == ("r", "n#0")
    assert message_args(two) == ("r", ["n#0", "n#1"])
    assert [instances_of(message_args(c)) for c in (one, two)] == [("r", ["n#0"]),
                                                                   ("r", ["n#0", "n#1"])]
    with pytest.raises(TypeError, match="^a message's instance ids are a string or a list, "
                       "not 7$"):
        instances_of(("r", 7))  # a message no version of genloop sends


def test_chunks_keep_runs_and_queues_apart_and_small_releases_whole():
    many = [_inst("a", i) for i in range(10 * MIN_MESSAGES)]
    gpu = [_inst("a", i, "gpu") for i in range(3)]
    chunks = chunked(many + gpu + [_inst("b", 0)])
    assert all(len({(i.run_id, i.queue) for i in c}) == 1 for c in chunks)
    assert [len(c) for c in chunks if c[0].queue == "gpu"] == [1, 1, 1]
    assert [len(c) for c in chunks if c[0].run_id == "a" and c[0].queue == "cpu"] == [10] * 16
    assert [[i.instance_id for i in c] for c in chunks if c[0].run_id == "b"] == [["n0#0"]]
    huge = chunked([_inst("c", i) for i in range(100 * MAX_CHUNK)])
    assert {len(c) for c in huge} == {MAX_CHUNK}


def test_a_small_release_picked_together_goes_as_one_message_and_a_wide_one_spreads():
    def shards(run: str, images: list[int]) -> list[InstanceRecord]:
        return [InstanceRecord(run_id=run, instance_id=f"g#{k}", node_id="g", seq=k,
                               queue="gpu", expected_items=n) for k, n in enumerate(images)]

    def sizes(instances: list[InstanceRecord]) -> list[int]:
        return [len(c) for c in chunked(instances, lambda inst: inst.run_id != "other")]

    # A loop's round (eight images, one an instance, or two shards of four) and a release of
    # exactly TOGETHER_IMAGES go whole; one image more, or a run not picked, as before
    assert sizes(shards("r", [1] * 8)) == [8]
    assert sizes(shards("r", [4, 4])) == [2]
    assert sizes(shards("r", [4] * (TOGETHER_IMAGES // 4))) == [TOGETHER_IMAGES // 4]
    assert sizes(shards("r", [4] * (TOGETHER_IMAGES // 4) + [1])) == [1] * (
        TOGETHER_IMAGES // 4 + 1)
    assert sizes(shards("other", [1] * 8)) == [1] * 8


@pytest.mark.parametrize("priority", ["interactive", "batch"])
def test_a_loops_round_goes_to_one_worker_as_one_message_in_the_interactive_lane(
        client, runtime, priority):
    seen = MessageLog()
    runtime.broker.add_middleware(seen)
    loop = Loop(prompt="a red circle", model="tiny", steps=2, candidates=4, rounds=2,
                refiner="seed-search", evaluator="clip", priority=priority)

    result = client.submit(loop).wait(timeout=120)

    # Then round 2's four images (a map node's four instances) went in one message when the
    # run was interactive (one engine, one batch), and four messages in the batch lane
    assert result.status == RunStatus.SUCCEEDED
    round_two = [ids for ids in seen.messages if any(i.startswith("round-2/generate") for i in ids)]
    assert sorted(map(len, round_two)) == ([4] if priority == "interactive" else [1] * 4)


def test_a_chunks_failing_instance_is_retried_alone_and_the_others_run_once(client, runtime,
                                                                            tmp_path):
    seen = MessageLog()
    runtime.broker.add_middleware(seen)
    log = str(tmp_path / "log")
    g = Graph()
    n = 4 * MIN_MESSAGES
    for i in range(n):
        params = {"log": log, "value": i}
        if i == 5:
            params["fail_times"] = 2  # fails twice (Transient), then succeeds
        if i == 9:
            params.update(fail_times=9, permanent=True)
        g.add("test-count", id=f"n{i}", params=params, max_retries=3)

    run = client.submit(g)
    result = run.wait(timeout=60)

    # Then the roots went out four to a message
    chunks = [ids for ids in seen.messages if len(ids) > 1]
    assert sum(len(ids) for ids in chunks) == n and {len(ids) for ids in chunks} == {4}
    # And the flaky one was sent again alone, twice, and succeeded; the permanent one failed
    # alone; every other instance of their chunks ran once
    assert seen.messages.count(["n5"]) == 2
    assert executions(log, "n5:5") == 3 and executions(log, "n9:9") == 1
    assert all(executions(log, f"n{i}:{i}") == 1 for i in range(n) if i not in (5, 9))
    assert result.status == RunStatus.FAILED
    assert [(f.node_id, f.error_type, f.attempts) for f in result.failures] == [
        ("n9", "Permanent", 1)]
    retries = [e for e in run.events(follow=False) if e.type == "instance.retry"]
    assert {(e.node_id, e.attempt) for e in retries} == {("n5", 1), ("n5", 2)}


def _chunk_runs(client, runtime, tmp_path, sleep_of) -> tuple[list[list[str]], dict]:
    """Run 4 * MIN_MESSAGES test-count roots (chunks of 4; node ``n{i}`` sleeps
    ``sleep_of(i)`` seconds); each chunk's instance ids, and each instance's start and success
    as ``(position in the run's events, time)`` under ``(type, instance id)``."""
    seen = MessageLog()
    runtime.broker.add_middleware(seen)
    log = str(tmp_path / "log")
    g = Graph()
    for i in range(4 * MIN_MESSAGES):
        g.add("test-count", id=f"n{i}", params={"log": log, "value": i, "sleep": sleep_of(i)})
    run = client.submit(g)
    assert run.wait(timeout=60).status == RunStatus.SUCCEEDED
    events = [e for e in run.events(follow=False)
              if e.type in ("instance.started", "instance.succeeded")]
    chunks = [ids for ids in seen.messages if len(ids) > 1]
    assert [len(ids) for ids in chunks] == [4] * MIN_MESSAGES
    return chunks, {(e.type, e.instance_id): (k, e.time) for k, e in enumerate(events)}


def test_a_chunk_of_quick_instances_starts_them_together_and_stores_them_together(
        client, runtime, tmp_path, monkeypatch):
    # An empty op body takes well under a second on any machine, but not always under the
    # default 20 ms on a loaded one (it failed at loads of 4 to 10): the threshold is raised
    monkeypatch.setattr(executor, "TOGETHER_BELOW", 1.0)
    chunks, at = _chunk_runs(client, runtime, tmp_path, lambda i: 0.0)

    # Then in every chunk the first started alone, the others all started before any ended,
    # and the first's result was stored with theirs
    for first, *rest in chunks:
        started = [at["instance.started", i][0] for i in rest]
        succeeded = [at["instance.succeeded", i][0] for i in (first, *rest)]
        assert at["instance.started", first][0] < min(started)
        assert max(started) < min(succeeded)


def test_a_chunk_of_slow_instances_runs_them_one_by_one(client, runtime, tmp_path):
    chunks, at = _chunk_runs(client, runtime, tmp_path, lambda i: 2 * TOGETHER_BELOW)

    # Then each instance ended before the next one of its chunk started
    for ids in chunks:
        for this, following in pairwise(ids):
            assert at["instance.succeeded", this][0] < at["instance.started", following][0]


def test_a_slow_instance_among_quick_ones_holds_their_results_back_no_longer_than_itself(
        client, runtime, tmp_path):
    slow = 0.15
    chunks, at = _chunk_runs(client, runtime, tmp_path, lambda i: slow if i % 4 >= 2 else 0.0)

    # Then the quick second instance's result was stored with the slow third's, not held
    # until the slow fourth ended too
    for _, quick, _, last in chunks:
        assert at["instance.succeeded", quick][1] < at["instance.succeeded", last][1] - slow / 2


def test_a_quick_chunks_first_result_survives_a_store_outage_when_the_others_start(
        client, runtime, tmp_path):
    # Given the store fails the first time a chunk's other instances start together
    scheduler = runtime.scheduler
    real, failed = scheduler.claim_and_start_many, []

    def flaky(claims, ttl):
        if len(claims) > 1 and not failed:
            failed.append(len(claims))
            raise StoreError("redis: connection lost")
        return real(claims, ttl)

    scheduler.claim_and_start_many = flaky
    seen = MessageLog()
    runtime.broker.add_middleware(seen)
    log = str(tmp_path / "log")
    g = Graph()
    for i in range(4 * MIN_MESSAGES):
        g.add("test-count", id=f"n{i}", params={"log": log, "value": i})

    # When the run goes through
    run = client.submit(g)
    assert run.wait(timeout=60).status == RunStatus.SUCCEEDED

    # Then that chunk's message was delivered again, and every instance ran once: the first
    # one's result, computed before the outage, was stored then, so its redelivery reused it
    assert failed == [3]
    assert any(seen.messages.count(ids) == 2 for ids in seen.messages if len(ids) > 1)
    assert all(executions(log, f"n{i}:{i}") == 1 for i in range(4 * MIN_MESSAGES))
