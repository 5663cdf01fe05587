"""``Loop.give_up``: a loop whose scores reach no floor in its first rounds stops there and keeps
its best image; one that reached the floor goes on; a give-up that could never happen is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from genloop import shapes
from genloop.sdk import GiveUp, Loop, RunStatus

CAPTION = "a small cyan square in the centre, white background"


def _loop(below: float) -> Loop:
    return Loop(prompt=CAPTION, model=shapes.PIPELINE_NAME, evaluator="shapes-reader", steps=2,
                candidates=2, rounds=4, give_up=GiveUp(rounds=2, below=below))


def test_a_loop_below_the_floor_gives_up_after_its_rounds_and_keeps_its_best(client):
    # Given a floor no score reaches (the reader scores 0-100)
    result = client.submit(_loop(below=101.0)).wait(timeout=300)
    # Then the loop ran two rounds of its four, succeeded, and kept the best of them
    assert result.status == RunStatus.SUCCEEDED
    assert sorted({c.round for c in result.scored}) == [1, 2]
    assert result.best is not None
    assert result.best.score == max(c.score for c in result.scored)


def test_a_loop_that_reached_the_floor_goes_on(client):
    # Given a floor every score reaches
    result = client.submit(_loop(below=0.0)).wait(timeout=300)
    # Then every round ran
    assert result.status == RunStatus.SUCCEEDED
    assert sorted({c.round for c in result.scored}) == [1, 2, 3, 4]


def test_a_give_up_at_or_after_the_last_round_is_refused():
    with pytest.raises(ValidationError, match="must be fewer than rounds"):
        Loop(prompt=CAPTION, rounds=3, give_up={"rounds": 3, "below": 50})
    with pytest.raises(ValidationError):
        Loop(prompt=CAPTION, rounds=3, give_up={"rounds": 0, "below": 50})
