"""What scoring one image is priced at: a pass per evaluator, a composite's or an ensemble's
weighted parts, a brand palette's length."""

from __future__ import annotations

import pytest

from genloop.evaluators.pricing import COLOURS_PER_PASS, PASS_COST, score_cost


def test_an_evaluator_is_one_pass_and_a_composite_its_weighted_parts():
    assert score_cost(None, None) == score_cost("clip", {}) == PASS_COST
    three = {"weights": {"clip": 1, "aesthetic": 0.5, "brand-palette": 0.2, "hf-clip": 0},
             "options": {"brand-palette": {"palette": ["#e4002b"]}}}
    # the zero-weight part is never built, so it costs nothing
    assert score_cost("composite", three) == pytest.approx(
        PASS_COST * (3 + 1 / COLOURS_PER_PASS))


def test_an_ensemble_is_its_parts_negative_weights_too():
    parts = {"weights": {"shapes-reader": 0.9, "shapes-clip": -0.3, "shapes-vqa": 0}}
    # a learned weight may be negative, and that part is scored; a zero one is never built
    assert score_cost("ensemble", parts) == pytest.approx(2 * PASS_COST)
    assert score_cost("composite", parts) == pytest.approx(PASS_COST)


def test_a_palette_costs_what_its_length_costs():
    # The 90,000-colour palette of the probe cost ~10 passes an image (4.4 s against 0.46 s)
    long = score_cost("brand-palette", {"palette": ["#000000"] * 90_000})
    assert long == pytest.approx(10 * PASS_COST)
    assert score_cost("brand-palette", {"palette": ["#000000"] * 32}) > PASS_COST
