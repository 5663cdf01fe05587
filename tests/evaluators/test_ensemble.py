"""ensemble: judges combined with learned weights. Fitting ranks one prompt's images by the
parts that tell them apart and calibrates the score over all prompts; the judge scores
``100 x sigmoid(bias + sum weight x feature)`` of its parts' real scores, refuses weights that
are no numbers, and judges a loop through ``Client.local``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from genloop import shapes
from genloop.evaluators import get_evaluator
from genloop.evaluators.ensemble import feature, fit, within_prompt_auc
from genloop.sdk import Loop, RunStatus
from genloop.sdk.errors import Permanent
from genloop.shapes import dataset

PAIR = "a large red circle left of a small blue square, white background"


def labelled(prompts: int = 80, per_prompt: int = 8, seed: int = 0):
    """Images whose rightness a ``ranker`` feature shows within a prompt but whose scale moves
    from prompt to prompt (as CLIP's cosine does), a ``pooled`` feature that shows it more
    weakly on one scale for all, and a feature that is noise."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(prompts), per_prompt)
    correct = rng.random(len(groups)) < 0.4
    offset = rng.normal(0, 4, prompts)[groups]
    ranker = offset + 2.0 * correct + rng.normal(0, 1, len(groups))
    pooled = 1.0 * correct + rng.normal(0, 1, len(groups))
    noise = rng.normal(0, 1, len(groups))
    return np.stack([ranker, pooled, noise], 1), correct, groups


def test_fitting_ranks_within_prompts_and_calibrates_over_all_of_them():
    x, correct, groups = labelled()

    weights, bias = fit(x, correct, groups)
    score = x @ weights + bias

    single = [within_prompt_auc(x[:, k], correct, groups) for k in range(3)]
    assert within_prompt_auc(score, correct, groups) > max(single)
    assert weights[0] > weights[1] > 10 * abs(weights[2])
    # calibrated: the mean probability is the share of right images, over all prompts
    assert np.mean(1 / (1 + np.exp(-score))) == pytest.approx(correct.mean(), abs=0.02)
    with pytest.raises(ValueError, match="nothing to rank"):
        fit(x[:8], np.ones(8, bool), groups[:8])


def test_a_probability_adds_its_log_odds_and_a_similarity_itself():
    assert feature([50.0, 90.0, 10.0], probability=True) == pytest.approx(
        [0.0, math.log(9), -math.log(9)])
    assert feature([30.0, 90.0], probability=False) == pytest.approx([0.3, 0.9])
    # a certain judge's 0 and 100 are held short of infinite log-odds
    certain = feature([0.0, 100.0], probability=True)
    assert np.isfinite(certain).all()
    assert certain[1] == pytest.approx(-certain[0]) and certain[1] > 5


def test_an_ensemble_scores_the_sigmoid_of_its_weighted_parts_with_the_readers_critique():
    # a learned weight may be negative: that part counts against
    weights = {"shapes-clip": -2.5, "shapes-reader": 0.8}
    ensemble = get_evaluator("ensemble", "cpu", weights=weights, bias=-1.5)
    truth = shapes.parse_caption(PAIR)
    images = [dataset.render(truth), dataset.render(truth.mirrored())]

    scores = ensemble.score(images, PAIR)

    clip, reader = (get_evaluator(n, "cpu").score(images, PAIR) for n in weights)
    assert not clip.details and reader.details and clip.embeddings
    logit = (-1.5 - 2.5 * np.asarray(clip.values) / 100
             + 0.8 * feature(reader.values, probability=True))
    assert scores.values == pytest.approx((100 / (1 + np.exp(-logit))).tolist())
    assert scores.values[0] > 50 > scores.values[1]  # the mirror has the relation wrong
    assert scores.details == reader.details and scores.embeddings == clip.embeddings
    assert ensemble.identity == (f"ensemble(-2.5*{get_evaluator('shapes-clip').identity},"
                                 f"0.8*{get_evaluator('shapes-reader').identity};-1.5)")
    assert ensemble.probability


@pytest.mark.parametrize(("options", "said"), [
    ({}, "ensemble needs weights"),
    ({"weights": {"shapes-clip": math.nan}}, "weight of 'shapes-clip' must be a finite number"),
    ({"weights": {"shapes-clip": True}}, "must be a finite number"),
    ({"weights": {"shapes-clip": 1}, "bias": "1"}, "bias must be a finite number"),
    ({"weights": {"shapes-clip": 0}}, "all ensemble weights are zero"),
    ({"weights": {"no-such-judge": 1}}, "unknown evaluators \\['no-such-judge'\\]"),
    ({"weights": {"shapes-clip": 1}, "options": {"shapes-vqa": {}}}, "which have no weight"),
])
def test_weights_that_are_no_numbers_or_name_no_judge_are_refused(options, said):
    with pytest.raises(Permanent, match=said):
        get_evaluator("ensemble", "cpu", **options)


def test_a_loop_judged_by_an_ensemble_runs_and_stops_at_its_target(client):
    loop = Loop(prompt="a large red circle in the centre, black background",
                model=shapes.PIPELINE_NAME, evaluator="ensemble", target=50, steps=4,
                evaluator_options={"weights": {"shapes-reader": 1.0, "shapes-clip": 0.5},
                                   "bias": -0.2},
                candidates=2, rounds=3, seed=0)

    result = client.submit(loop).wait(timeout=120)

    assert result.status == RunStatus.SUCCEEDED, result.error
    assert {c.evaluator.split("(")[0] for c in result.scored} == {"ensemble"}
    assert all(c.details is not None for c in result.scored)
    assert result.best is not None and result.best.score >= 50
    assert len(result.rounds) < 3


def test_fit_ensembles_cross_fit_deals_the_prompts_that_rank_to_both_halves():
    from genloop.shapes.training.fit_ensemble import report

    x, correct, groups = labelled(prompts=24)
    # only every fourth group (prompt 0, 2, 4 ... at full steps) has both verdicts
    mixed = groups % 4 == 0
    correct = np.where(mixed, correct, groups % 8 == 1)
    scores = {"a": x[:, 0], "b": 100 * x[:, 1]}

    out = report(["a", "b"], scores, correct, groups, {"a": False, "b": False})

    assert out["prompts"] == 12 and out["ensemble_auc_crossfit"] > 0.5
    with pytest.raises(ValueError, match="1 prompt\\(s\\) had both"):
        report(["a", "b"], scores, np.where(groups == 0, correct, groups % 8 == 1), groups,
               {"a": False, "b": False})


@pytest.mark.slow
def test_fit_ensemble_writes_options_an_ensemble_takes(tmp_path, capsys):
    from genloop.shapes.training import fit_ensemble

    out = tmp_path / "ensemble.json"
    fit_ensemble.main(["--prompts", "8", "--seeds", "4", "--steps", "4", "--draft-steps", "2",
                       "--out", str(out)])

    report = json.loads(capsys.readouterr().out)
    options = json.loads(out.read_text())
    assert options == report["options"] and set(options["weights"]) == {
        "shapes-reader", "shapes-clip"}
    assert report["images"] == 8 * 4 * 2 and 0 < report["correct"] < 1
    assert 0 <= report["ensemble_auc_crossfit"] <= 1
    ensemble = get_evaluator("ensemble", "cpu", **options)
    assert 0 <= ensemble.score([dataset.render(shapes.parse_caption(PAIR))], PAIR).values[0] <= 100
