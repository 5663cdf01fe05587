"""Compute accounting: every image's denoising steps add up in RunResult.compute, and a
Loop's budget cuts later rounds to what is left."""

from __future__ import annotations

import pytest

from genloop.sdk import Loop, NodeStatus, RunStatus


def test_compute_adds_up_across_rounds(client):
    result = client.submit(
        Loop(prompt="a red sneaker", candidates=3, rounds=3, steps=2)
    ).wait(timeout=180)

    assert result.status == RunStatus.SUCCEEDED
    assert result.compute.images == 9
    assert result.compute.steps == 9 * 2 == sum(c.cost for c in result.scored)
    assert result.compute.wall_s is not None and result.compute.wall_s > 0
    assert result.model_dump(mode="json")["compute"]["steps"] == 18  # travels in the JSON


def test_budget_cuts_the_last_round_to_what_is_left(client):
    loop = Loop(prompt="a blue kettle", candidates=4, rounds=3, steps=2, budget=20)

    result = client.submit(loop).wait(timeout=180)

    assert result.status == RunStatus.SUCCEEDED
    assert [len(r.candidates) for r in result.rounds] == [4, 4, 2]
    assert result.compute.steps == 20


def test_a_spent_budget_halts_the_loop(client):
    result = client.submit(
        Loop(prompt="a green lamp", candidates=2, rounds=3, steps=2, budget=4)
    ).wait(timeout=180)

    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["round-2/generate"].status == NodeStatus.SKIPPED
    assert result.compute.steps == 4


def test_budget_is_counted_in_steps_so_it_needs_them():
    with pytest.raises(ValueError, match="give steps"):
        Loop(prompt="x", budget=100)
    with pytest.raises(ValueError, match="over the budget"):
        Loop(prompt="x", candidates=8, steps=20, budget=100)
