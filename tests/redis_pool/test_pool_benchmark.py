"""benchmarks/pool.py runs end to end in its smoke size (--quick, under a minute): real worker
processes on a Redis of its own, simulated models, both routing sides; the figures it reports
for #39's goals come from a script that works."""

from __future__ import annotations

import json

import pytest
from benchmark_util import load_benchmark


def test_the_benchmark_sizes_its_models_by_the_workers_own_budget():
    from genloop.workers.engine.residency import default_budget

    assert load_benchmark("pool").worker_budget() == default_budget("cpu")


@pytest.mark.slow
def test_the_quick_run_reports_both_sides(capsys):
    # When the smoke run runs (it exits with an error if any loop or campaign run fails)
    assert load_benchmark("pool").main(["--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # Then each side loaded every model at least once, ran every loop and the whole campaign
    for side in report["sides"].values():
        assert side["loads"] >= side["min_loads"] == 3
        assert len(side["loops_idle_s"]) == len(side["loops_beside_batch_s"]) == 2
        # and names each loop beside the batch: its model and its latency
        assert sorted(r["s"] for r in side["loops_beside_batch"]) == sorted(
            round(s, 2) for s in side["loops_beside_batch_s"])
        assert all(r["model"] in ("sim-a", "sim-b", "sim-c") for r in side["loops_beside_batch"])
        assert side["batch_images_per_s"] > 0 and side["backlog_estimate_s"] > 0
        assert 0 <= side["utilisation"] <= 1
    assert set(report["on_vs_off"]) >= {"loads", "batch_images_per_s"}
