"""`genloop worker --metrics-port`: each worker process serves its own /metrics, and the
processes' counters add up to what the run did."""

from __future__ import annotations

import pytest
from metrics_util import free_ports, label_problems, scrape_settled, value, wait_scrape
from redis_util import POOL_DB, redis_url

from genloop.sdk import Client, Graph, RunStatus

pytestmark = pytest.mark.slow


def test_each_worker_process_serves_metrics_that_add_up(pool, redis_client, tmp_path):
    port = free_ports(2)
    pool.start(processes=2, threads=2, args=("--metrics-port", str(port)))
    pool.wait_ready(redis_client)
    urls = [f"http://127.0.0.1:{p}/metrics" for p in (port, port + 1)]
    for url in urls:
        wait_scrape(url)
    log = str(tmp_path / "count.log")
    g = Graph()
    g.add("test-render", id="render", params={"redis_url": redis_url(POOL_DB), "tag": "m",
                                              "n": 6, "shard_size": 2, "seconds": 0.05})
    g.add("test-count", id="flaky", params={"log": log, "fail_times": 1}, max_retries=2)

    with Client.connect(redis_url(POOL_DB)) as client:
        run = client.submit(g)
        result = run.wait(timeout=60)
    scrapes = scrape_settled(
        urls, lambda s: sum(value(x, "genloop_runs_total", status="succeeded") for x in s) > 0)

    def total(name: str, **labels: str) -> float:
        return sum(value(s, name, **labels) for s in scrapes)

    assert result.status == RunStatus.SUCCEEDED
    assert total("genloop_instances_total", op="test-render", status="succeeded") == 3
    assert total("genloop_nodes_total", op="test-render", status="succeeded") == 1
    assert total("genloop_retries_total", op="test-count", error_type="Transient") == 1
    assert total("genloop_runs_total", status="succeeded") == 1
    assert total("genloop_runs_total", status="submitted") == 0  # the client submitted it
    assert total("genloop_queue_wait_seconds_count", queue="gpu") >= 3
    assert total("genloop_queue_wait_seconds_count", queue="cpu") >= 2
    for s in scrapes:
        assert label_problems(s, {run.id}) == []
