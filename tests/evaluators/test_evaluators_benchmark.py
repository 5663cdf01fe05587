"""The evaluator benchmark runs end to end on a handful of candidates and agrees with itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "evaluators.py"


def test_benchmark_reports_json_with_matching_scores(capsys):
    spec = importlib.util.spec_from_file_location("benchmark_evaluators", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(
        ["--candidates", "6", "--prompts", "2", "--repeats", "1", "--image-size", "40", "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    for label in ["score", "score_texts"]:
        assert report[label]["max_abs_diff_vs_naive"] < 1e-3
        assert report[label]["images_per_s"] > 0
    assert report["naive"]["images_per_s"] > 0 and report["model"] == "clip:tiny-clip-v1"
