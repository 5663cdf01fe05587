"""benchmarks/option_sets.py runs end to end on a few runs: the figure the README quotes for
issue #40's memory goal comes from a script that works."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "option_sets.py"


@pytest.mark.slow
def test_the_benchmark_reports_the_growth_and_holds_the_bound(capsys):
    spec = importlib.util.spec_from_file_location("benchmark_option_sets", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--runs", "40", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == 40 and report["evaluators_held"] <= report["bound"]
    assert report["growth_mb"] < report["goal_mb"]
