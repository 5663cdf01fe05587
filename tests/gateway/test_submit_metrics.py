"""The gateway counts what it submits on both back ends: over Redis it runs no worker, and its
runs and root nodes queued used to be counted nowhere; nor does a submit-only process keep the
instances it sends for worker threads it does not have."""

from __future__ import annotations

from metrics_util import moved, scrape

from genloop.sdk import Graph

TOKEN = "test-operator"  # conftest's METRICS_TOKEN


def test_submitted_runs_and_queued_roots_are_counted_by_the_gateway(stack):
    _, key = stack.tenant()
    client = stack.client(key)
    before = scrape(f"{stack.url}/metrics", TOKEN)
    for i in range(3):
        g = Graph()
        g.add("gw-image", params={"label": f"metered-{i}", "n": 1}, id="image")
        client.submit(g).wait(timeout=60)
    after = scrape(f"{stack.url}/metrics", TOKEN)

    assert moved(before, after, "genloop_runs_total", status="submitted") == 3
    assert moved(before, after, "genloop_nodes_total", op="gw-image", status="queued") == 3
    if stack.kind == "redis":  # the gateway runs no op: it keeps nothing for worker threads
        assert not stack.backend.scheduler.just_sent._kept
