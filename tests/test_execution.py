"""Running graphs embedded: order, map, retries, quorum, idempotent results, duplicates."""

from __future__ import annotations

import logging

import pytest
from genloop_test_ops import executions

from genloop.sdk import (
    GenloopError,
    Graph,
    GraphError,
    IdempotencyConflict,
    NodeStatus,
    RunStatus,
)


def test_nodes_run_after_their_inputs_and_see_their_outputs(client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    a = g.add("test-count", id="a", params={"log": log, "value": 1})
    b = g.add("test-count", id="b", params={"log": log, "value": 10})
    g.add("test-count", id="c", inputs=[a, b], params={"log": log, "value": 100})

    result = client.submit(g).wait(timeout=30)

    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["c"].items == [{"value": 111}]
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[-1] == "c:100" and set(lines[:2]) == {"a:1", "b:10"}


def test_map_runs_once_per_item_of_the_parent(client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    src = g.add("test-items", id="src", params={"log": log, "value": 5})
    doubled = g.add("test-each", id="each", inputs=[src], map=True, params={"log": log})
    g.add("test-sum", id="sum", inputs=[doubled], params={"log": log})

    result = client.submit(g).wait(timeout=30)

    assert result.status == RunStatus.SUCCEEDED
    assert [i["value"] for i in result.outputs["each"].items] == [0, 2, 4, 6, 8]
    assert result.outputs["sum"].items == [{"value": 20}]
    assert sorted(executions(log, f"each:{i}") for i in range(5)) == [1] * 5


def test_flaky_op_succeeds_after_two_retry_events(client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="flaky", params={"log": log, "fail_times": 2}, max_retries=3)

    run = client.submit(g)
    result = run.wait(timeout=30)

    assert result.status == RunStatus.SUCCEEDED
    retries = [e for e in run.events(follow=False) if e.type == "instance.retry"]
    assert [e.attempt for e in retries] == [1, 2]
    assert all("planned failure" in e.error for e in retries)
    assert executions(log) == 3


def test_a_retried_transient_failure_is_one_warning_line_with_its_attempt(client, tmp_path,
                                                                           caplog):
    # Given an op that fails transiently twice, then succeeds
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="flaky", params={"log": log, "fail_times": 2}, max_retries=3)
    # When it runs
    with caplog.at_level(logging.INFO):
        result = client.submit(g).wait(timeout=30)
    # Then each retried attempt is one WARNING line naming its attempt, with no traceback,
    # and nothing is logged at ERROR
    assert result.status == RunStatus.SUCCEEDED
    retried = [r for r in caplog.records if "failed, retrying" in r.getMessage()]
    assert [r.levelno for r in retried] == [logging.WARNING] * 2
    assert [r.getMessage().split(" failed")[0].rsplit(" ", 2)[1:] for r in retried] == [
        ["attempt", "1"], ["attempt", "2"]]
    assert all("Transient: planned failure" in r.getMessage() and r.exc_info is None
               for r in retried)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_reused_idempotency_key_with_another_spec_is_a_genloop_409(client, tmp_path):
    log = str(tmp_path / "log")
    one, two = Graph(), Graph()
    one.add("test-count", params={"log": log, "value": 1})
    two.add("test-count", params={"log": log, "value": 2})
    first = client.submit(one, idempotency_key="k")
    with pytest.raises(IdempotencyConflict) as caught:
        client.submit(two, idempotency_key="k")
    assert isinstance(caught.value, GenloopError) and caught.value.status_code == 409
    assert caught.value.run_id == first.id and caught.value.code == "idempotency_conflict"


def test_permanent_error_is_not_retried(client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    bad = g.add("test-count", id="bad", params={"log": log, "fail_times": 5, "permanent": True},
                max_retries=5)
    g.add("test-count", id="after", inputs=[bad], params={"log": log})

    run = client.submit(g)
    result = run.wait(timeout=30)

    assert result.status == RunStatus.FAILED
    assert executions(log) == 1
    assert [f.error_type for f in result.failures] == ["Permanent"]
    assert result.failures[0].attempts == 1
    assert result.outputs["after"].status == NodeStatus.SKIPPED
    assert not [e for e in run.events(follow=False) if e.type == "instance.retry"]


def _fan_in(log: str, min_success: int | None) -> Graph:
    g = Graph()
    src = g.add("test-items", id="src", params={"log": log, "value": 8})
    each = g.add("test-each", id="each", inputs=[src], map=True, max_retries=1,
                 params={"log": log, "fail_when": 3})
    total = g.add("test-sum", id="sum", inputs=[each], min_success=min_success,
                  params={"log": log})
    g.add("test-sum", id="after", inputs=[total], params={"log": log})
    return g


def test_quorum_met_runs_on_the_successes_and_lists_the_failure(client, tmp_path):
    log = str(tmp_path / "log")

    result = client.submit(_fan_in(log, min_success=6)).wait(timeout=30)

    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["sum"].items == [{"value": 2 * (28 - 3)}]
    assert [(f.node_id, f.instance_id, f.attempts) for f in result.failures] == [
        ("each", "each[3]", 2)]
    assert "always fails" in result.failures[0].message


def test_quorum_missed_fails_with_quorum_error_and_skips_downstream(client, tmp_path):
    log = str(tmp_path / "log")

    result = client.submit(_fan_in(log, min_success=8)).wait(timeout=30)

    assert result.status == RunStatus.FAILED
    assert result.outputs["sum"].status == NodeStatus.FAILED
    assert result.outputs["sum"].error.startswith("QuorumError: 7 of 8")
    assert "each[3]" in result.outputs["sum"].error
    assert result.outputs["after"].status == NodeStatus.SKIPPED
    assert executions(log, "sum:sum") == 0


def test_default_quorum_of_a_reducer_is_every_item(client, tmp_path):
    result = client.submit(_fan_in(str(tmp_path / "log"), None)).wait(timeout=30)
    assert result.outputs["sum"].error.startswith("QuorumError")


def test_resubmitting_a_finished_graph_runs_no_op_body(client, tmp_path):
    log = str(tmp_path / "log")
    g = _fan_in(log, min_success=6)
    first = client.submit(g).wait(timeout=30)
    ran = executions(log)

    run = client.submit(g)
    second = run.wait(timeout=30)

    assert executions(log) - ran == 2  # only the always-failing item is tried again (2 attempts)
    assert second.outputs["sum"].items == first.outputs["sum"].items
    cached = [e for e in run.events(follow=False) if e.type == "instance.succeeded"]
    assert cached and all("cached" in e.message for e in cached)


def test_idempotency_key_returns_the_same_run(client, tmp_path):
    g = Graph()
    g.add("test-count", params={"log": str(tmp_path / "log")})

    a = client.submit(g, idempotency_key="k1")
    b = client.submit(g, idempotency_key="k1")

    assert a.id == b.id
    other = Graph()
    other.add("test-count", params={"log": str(tmp_path / "other")})
    with pytest.raises(Exception, match="idempotency key"):
        client.submit(other, idempotency_key="k1")


def test_invalid_graph_creates_nothing(client, runtime):
    g = Graph()
    g.add("no-such-op")
    with pytest.raises(GraphError):
        client.submit(g)
    assert runtime.store._read("SELECT COUNT(*) FROM runs") == [(0,)]


def test_duplicate_message_runs_the_body_once(client, runtime, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="slow", params={"log": log, "sleep": 0.5})
    run = client.submit(g)
    inst = runtime.store.instance(run.id, "slow")

    runtime.wiring.enqueue([inst, inst])  # two more deliveries of the same message
    result = run.wait(timeout=30)
    runtime.broker.join("cpu", timeout=10_000)

    assert result.status == RunStatus.SUCCEEDED
    assert executions(log) == 1


def test_the_same_work_in_two_runs_at_once_runs_once(client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-count", id="slow", params={"log": log, "sleep": 0.5})

    a, b = client.submit(g), client.submit(g)

    assert a.wait(timeout=30).status == b.wait(timeout=30).status == RunStatus.SUCCEEDED
    assert executions(log) == 1


def test_a_submitted_runs_graph_is_its_own_copy_whatever_the_caller_does_next(
        runtime, tmp_path, monkeypatch):
    # Given a graph submitted, whose topology the submitting scheduler keeps from the submit
    # (it releases the roots without reading the stored spec back)
    store = runtime.scheduler.store
    spec_reads = []
    monkeypatch.setattr(store, "run_spec", lambda run_id: spec_reads.append(run_id))
    g = Graph()
    g.add("test-count", id="a", params={"log": str(tmp_path / "log"), "value": 1})
    run = runtime.scheduler.submit(g)
    assert spec_reads == []
    monkeypatch.undo()

    # When the caller goes on building on its graph object
    g.nodes[0].params["value"] = 2
    g.add("test-count", id="b", params={"log": str(tmp_path / "log"), "value": 3})

    # Then the run's topology is the graph as stored at submit, not the caller's object
    stored = Graph.model_validate(runtime.scheduler.store.run_spec(run.id).graph)
    assert runtime.scheduler.topology(run.id).graph == stored
    assert [n.id for n in stored.nodes] == ["a"] and stored.nodes[0].params["value"] == 1
