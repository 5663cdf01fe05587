"""The process's metrics are the one process-wide object of a runtime, and a test can put a
fresh registry in their place: a runtime built after the swap counts into it from zero."""

from __future__ import annotations

from genloop.sdk import Client, Graph, RunStatus
from genloop.workers.metrics import prometheus


def _value(metrics: prometheus.Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_runtime_built_after_the_swap_counts_into_the_fresh_metrics(tmp_path, monkeypatch):
    import genloop_test_ops  # noqa: F401  (test-count)

    # Given the process's metrics, and a fresh registry put in their place
    before = prometheus.metrics()
    succeeded_before = _value(before, "genloop_runs_total", status="succeeded")
    fresh = prometheus.Metrics()
    monkeypatch.setattr(prometheus, "_process", fresh)
    # When a runtime built afterwards runs two nodes
    g = Graph()
    first = g.add("test-count", id="a", params={"log": str(tmp_path / "log"), "value": 1})
    g.add("test-count", id="b", inputs=[first], params={"log": str(tmp_path / "log"), "value": 2})
    with Client.local(home=tmp_path / "home", threads=2) as client:
        assert client.submit(g).wait(60).status is RunStatus.SUCCEEDED
    # Then the fresh registry holds exactly that run, and the process's own saw none of it
    assert prometheus.metrics() is fresh
    assert _value(fresh, "genloop_runs_total", status="submitted") == 1
    assert _value(fresh, "genloop_runs_total", status="succeeded") == 1
    assert _value(fresh, "genloop_nodes_total", op="test-count", status="succeeded") == 2
    assert _value(before, "genloop_runs_total", status="succeeded") == succeeded_before
