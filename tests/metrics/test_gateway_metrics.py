"""/metrics of `genloop serve --local`: the gateway with its embedded workers. A scrape after a
run shows each counter moved by what the run did, and no label names a run or a tenant."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from metrics_util import label_problems, moved, scrape, scrape_settled, value

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app
from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.metrics.prometheus import MAX_ERROR_TYPES, Metrics
from genloop.workers.stores.records import EventRecord

TOKEN = "operator-only"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
from server import LiveServer  # noqa: E402


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, resources):
    from genloop.workers.backends.embedded import EmbeddedBackend

    tmp = tmp_path_factory.mktemp("metrics")
    backend = EmbeddedBackend(tmp / "home", threads=2, resources=resources, lease_ttl=5.0)
    store = SqliteGatewayStore(tmp / "gateway.db")
    with LiveServer(create_app(backend, store, GatewaySettings(metrics_token=TOKEN))) as server:
        yield server.url, store
    backend.close()
    store.close()


def test_a_scrape_after_a_run_shows_what_the_run_did(gateway, tmp_path):
    import genloop_test_ops  # noqa: F401  (test-count: fails as told)

    url, store = gateway
    tenant = "metered"
    client = Client.http(url, api_key=store.create_key(tenant))
    log = str(tmp_path / "count.log")
    g = Graph()
    gen = g.generate("a red circle", n=4, steps=2, model="tiny", id="gen")
    g.score(gen, text="a red circle", evaluator="clip", id="score")
    g.add("test-count", id="flaky", params={"log": log, "fail_times": 1}, max_retries=2)
    g.add("test-count", id="broken", params={"log": log, "value": 7, "fail_times": 9,
                                             "permanent": True})
    before = scrape(f"{url}/metrics", TOKEN)

    run = client.submit(g)
    result = run.wait(timeout=120)
    [after] = scrape_settled(
        [f"{url}/metrics"],
        lambda s: moved(before, s[0], "genloop_runs_total", status="failed") > 0, TOKEN)

    assert result.status == RunStatus.FAILED  # 'broken' failed for good
    assert moved(before, after, "genloop_runs_total", status="submitted") == 1
    assert moved(before, after, "genloop_runs_total", status="failed") == 1
    assert moved(before, after, "genloop_runs_total", status="succeeded") == 0
    # every node was queued once: the roots at submit (gen, flaky, broken), score after gen
    assert moved(before, after, "genloop_nodes_total", op="generate", status="queued") == 1
    assert moved(before, after, "genloop_nodes_total", op="test-count", status="queued") == 2
    assert moved(before, after, "genloop_nodes_total", op="score", status="queued") == 1
    assert moved(before, after, "genloop_nodes_total", op="generate", status="succeeded") == 1
    assert moved(before, after, "genloop_nodes_total", op="test-count", status="succeeded") == 1
    assert moved(before, after, "genloop_nodes_total", op="test-count", status="failed") == 1
    assert moved(before, after, "genloop_retries_total", op="test-count",
                 error_type="Transient") == 1
    assert moved(before, after, "genloop_failures_total", op="test-count",
                 error_type="Permanent") == 1
    assert moved(before, after, "genloop_instances_total", op="test-count",
                 status="succeeded") == 1
    assert moved(before, after, "genloop_images_generated_total") == 4
    assert moved(before, after, "genloop_engine_batch_size_sum", kind="text") == 4
    # one duration per attempt that started: flaky twice, broken once, gen and score
    assert moved(before, after, "genloop_op_duration_seconds_count",
                 op="test-count", queue="cpu") == 3
    assert moved(before, after, "genloop_op_duration_seconds_count", op="generate",
                 queue="gpu") >= 1
    assert moved(before, after, "genloop_queue_wait_seconds_count", queue="cpu") >= 3
    assert value(after, "genloop_resident_models") >= 1
    assert value(after, "genloop_resident_model_bytes", model="tiny") > 0
    assert label_problems(after, {run.id, tenant}) == []

    # The same run again reuses every stored result: nothing generated, nothing timed.
    again = client.submit(g.model_copy(deep=True))
    again.wait(timeout=120)
    last = scrape(f"{url}/metrics", TOKEN)
    assert moved(after, last, "genloop_images_generated_total") == 0
    assert moved(after, last, "genloop_result_reuses_total", op="generate") >= 1


def test_error_types_stay_a_bounded_label_set():
    metrics = Metrics()

    def op_of(run_id: str, node_id: str) -> tuple[str, str]:
        return "op", "cpu"

    for i in range(MAX_ERROR_TYPES + 30):
        metrics.observe(f"run-{i}", EventRecord(type="instance.failed", time=0.0,
                                                node_id="n", instance_id=f"n[{i}]",
                                                error=f"Error{i}: boom {i}"), op_of)
    metrics.observe("run-x", EventRecord(type="instance.failed", time=0.0, node_id="n",
                                         instance_id="n", error="not a class name: x"), op_of)
    kinds = {s.labels["error_type"] for fam in metrics.failures.collect() for s in fam.samples
             if s.name.endswith("_total")}
    assert len(kinds) == MAX_ERROR_TYPES + 1 and "other" in kinds
    assert sum(s.value for fam in metrics.failures.collect() for s in fam.samples
               if s.name.endswith("_total")) == MAX_ERROR_TYPES + 31


def test_an_attempt_seen_starting_before_the_last_one_s_retry_keeps_both_durations():
    # Dramatiq re-sends a failed attempt before its retry event is written, so on a busy
    # machine the next attempt's start can be observed first
    metrics = Metrics()

    def op_of(run_id: str, node_id: str) -> tuple[str, str]:
        return "op", "cpu"

    for type_, at, attempt in [("instance.started", 0.0, 1), ("instance.started", 2.0, 2),
                               ("instance.retry", 1.0, 1), ("instance.succeeded", 5.0, 2)]:
        metrics.observe("r", EventRecord(type=type_, time=at, node_id="n", instance_id="n",
                                         attempt=attempt), op_of)
    samples = {s.name: s.value for fam in metrics.op_duration.collect() for s in fam.samples
               if s.labels.get("op") == "op" and not s.name.endswith("_bucket")}
    assert (samples["genloop_op_duration_seconds_count"],
            samples["genloop_op_duration_seconds_sum"]) == (2, 1.0 + 3.0)


def test_metrics_answer_only_the_operators_token_and_are_off_without_one(gateway, resources,
                                                                          tmp_path):
    import httpx

    from genloop.workers.backends.embedded import EmbeddedBackend

    url, store = gateway
    tenant_key = store.create_key("curious")
    for headers in ({}, {"Authorization": f"Bearer {tenant_key}"},
                    {"Authorization": "Bearer operator-onl"}):
        response = httpx.get(f"{url}/metrics", headers=headers)
        assert response.status_code == 401 and "genloop_" not in response.text
    # A gateway given no token serves no metrics on its (tenants') port at all
    backend = EmbeddedBackend(tmp_path / "home", threads=1, resources=resources)
    with LiveServer(create_app(backend, store, GatewaySettings())) as server:
        for headers in ({}, {"Authorization": f"Bearer {tenant_key}"}):
            assert httpx.get(f"{server.url}/metrics", headers=headers).status_code == 404
    backend.close()
