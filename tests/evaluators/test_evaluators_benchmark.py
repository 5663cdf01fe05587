"""The evaluator benchmark runs end to end on a handful of candidates and agrees with itself."""

from __future__ import annotations

import json

from benchmark_util import load_benchmark


def test_benchmark_reports_json_with_matching_scores(capsys):
    load_benchmark("evaluators").main(
        ["--candidates", "6", "--prompts", "2", "--repeats", "1", "--image-size", "40", "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    for label in ["score", "score_texts"]:
        assert report[label]["max_abs_diff_vs_naive"] < 1e-3
        assert report[label]["images_per_s"] > 0
    assert report["naive"]["images_per_s"] > 0 and report["model"] == "clip:tiny-clip-v1"
