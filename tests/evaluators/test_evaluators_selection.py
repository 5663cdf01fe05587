"""Selection strategies: top-k, threshold, and MMR diversity over constructed embeddings."""

from __future__ import annotations

import math

import pytest

from genloop.evaluators import select_threshold, select_top_k, select_top_k_diverse
from genloop.sdk.errors import Permanent


def test_top_k_is_best_first_with_ties_by_index():
    assert select_top_k([0.5, 0.9, 0.1, 0.9], 3) == [1, 3, 0]
    assert select_top_k([0.5, 0.9], 5) == [1, 0]
    assert select_top_k([0.5, 0.9], 0) == []


def test_threshold_keeps_passing_scores_best_first():
    assert select_threshold([10, 30, 20, 5], 10) == [1, 2, 0]
    assert select_threshold([10, 30, 20, 5], 10, k=2) == [1, 2]
    assert select_threshold([10, 30], 31) == []


def near_duplicate_case():
    """Candidate 0 is best; 1 is a near-copy of 0 scoring a little lower; 2 is different."""
    angle = 0.05
    embeddings = [
        [1.0, 0.0, 0.0],
        [math.cos(angle), math.sin(angle), 0.0],  # cos(0, 1) ~ 0.999
        [0.0, 0.0, 1.0],  # orthogonal to both
        [0.7, 0.7, 0.0],
    ]
    scores = [30.0, 29.5, 26.0, 20.0]
    return scores, embeddings


def test_mmr_prefers_a_different_candidate_over_a_near_duplicate():
    scores, embeddings = near_duplicate_case()
    # Plain top-k takes the near-copy second
    assert select_top_k(scores, 2) == [0, 1]
    # MMR with a moderate trade-off takes the different image instead
    assert select_top_k_diverse(scores, embeddings, 2, diversity=0.5) == [0, 2]


def test_diversity_zero_is_top_k_and_one_maximises_spread():
    scores, embeddings = near_duplicate_case()
    assert select_top_k_diverse(scores, embeddings, 4, diversity=0.0) == select_top_k(scores, 4)
    # With only distance counting, the near-copy is the last choice
    assert select_top_k_diverse(scores, embeddings, 4, diversity=1.0)[-1] == 1


def test_mmr_renormalises_raw_embeddings():
    scores, embeddings = near_duplicate_case()
    scaled = [[10 * x for x in e] for e in embeddings]
    assert select_top_k_diverse(scores, scaled, 3, 0.5) == select_top_k_diverse(
        scores, embeddings, 3, 0.5
    )


def test_mmr_with_equal_scores_is_purely_spread():
    embeddings = [[1.0, 0.0], [0.99, 0.1], [-1.0, 0.0]]
    assert select_top_k_diverse([1.0, 1.0, 1.0], embeddings, 2, 0.3) == [0, 2]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: select_top_k([1.0], -1), "k must be"),
        (lambda: select_top_k([1.0, float("nan")], 1), "score 1 is nan"),
        (lambda: select_threshold([1.0], float("inf")), "threshold"),
        (lambda: select_top_k_diverse([1.0, 2.0], [[1.0, 0.0]], 1, 0.5), "2 scores"),
        (lambda: select_top_k_diverse([1.0, 2.0], [[1.0, 0.0], [1.0]], 1, 0.5), "mismatched sizes"),
        (lambda: select_top_k_diverse([1.0, 2.0], [[1.0], [0.0]], 1, 0.5), "zero"),
        (lambda: select_top_k_diverse([1.0], [[1.0]], 1, 1.5), "diversity"),
    ],
)
def test_bad_inputs_are_permanent(call, match):
    with pytest.raises(Permanent, match=match):
        call()
