"""benchmarks/option_sets.py runs end to end on a few runs: the figure docs/benchmarks.md quotes for
issue #40's memory goal comes from a script that works."""

from __future__ import annotations

import json

import pytest
from benchmark_util import load_benchmark


@pytest.mark.slow
def test_the_benchmark_reports_the_growth_and_holds_the_bound(capsys):
    assert load_benchmark("option_sets").main(["--runs", "40", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == 40 and report["evaluators_held"] <= report["bound"]
    assert report["growth_mb"] < report["goal_mb"]
