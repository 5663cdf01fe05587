"""``--retry-failed``: failed variants get fresh runs, their earlier failure kept in the history;
without it a re-run brings back the same failed runs (their idempotency keys find them)."""

from __future__ import annotations

import pytest

from genloop.campaign import parse_spec, run
from genloop.campaign.runlog import RunLog
from genloop.evaluators import evaluator
from genloop.sdk import Client
from genloop.sdk.errors import Permanent

SPEC = {
    "name": "flaky",
    "axes": {"product": ["a red sneaker", "a blue ball"]},
    "template": "{product} on grass",
    "loop": {"model": "tiny", "evaluator": "campaign-test-flaky", "rounds": 1, "candidates": 1,
             "steps": 2},
}
#: While set, the judge below fails every ball: an outage the team fixes between two runs.
OUTAGE = {"on": True}


@evaluator("campaign-test-flaky", needs_text=True)
def flaky(images, text):
    if OUTAGE["on"] and "ball" in text:
        raise Permanent("the judge is down")
    return [1.0] * len(images)


@pytest.fixture
def local(tmp_path, resources):
    OUTAGE["on"] = True
    with Client.local(home=tmp_path / "home", threads=2, resources=resources) as client:
        yield client


def test_failed_variants_get_fresh_runs_and_keep_their_failure(tmp_path, local):
    spec, out = parse_spec(SPEC), tmp_path / "out"
    first = run(spec, local, out=out)
    assert [v.status for v in first.variants] == ["succeeded", "failed"]
    OUTAGE["on"] = False
    # A plain re-run finds the same failed run (its idempotency key), even with the log gone.
    (out / "flaky/runs.jsonl").unlink()
    again = run(spec, local, out=out)
    assert [v.run_id for v in again.variants] == [v.run_id for v in first.variants]
    assert again.variants[1].status == "failed"
    retried = run(spec, local, out=out, retry_failed=True)
    sneaker, ball = retried.variants
    assert (sneaker.status, sneaker.run_id, sneaker.history) == (
        "succeeded", first.variants[0].run_id, [])
    assert ball.status == "succeeded" and ball.run_id != first.variants[1].run_id
    assert [(a.run_id, a.status) for a in ball.history] == [(first.variants[1].run_id, "failed")]
    assert "the judge is down" in ball.history[0].error
    report = (out / "flaky/report.html").read_text()
    assert f"earlier run {first.variants[1].run_id}: failed" in report
    # Retrying again has nothing to retry: the same runs, the history kept.
    settled = run(spec, local, out=out, retry_failed=True)
    assert [v.run_id for v in settled.variants] == [v.run_id for v in retried.variants]
    assert settled.variants[1].history == ball.history
    assert RunLog(out / "flaky/runs.jsonl").attempts(ball.key) == 2


def test_the_cli_takes_retry_failed():
    import argparse

    from genloop.campaign.cli import setup

    parser = argparse.ArgumentParser()
    setup(parser)
    args = parser.parse_args(["run", "spec.yaml", "--retry-failed"])
    assert args.retry_failed is True
