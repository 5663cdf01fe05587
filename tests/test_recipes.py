"""A model's recipe: a Loop that says nothing of how to search runs the best loop measured."""

from __future__ import annotations

import pytest

from genloop import shapes
from genloop.sdk import Loop
from genloop.sdk.loop import RECIPE_FIELDS
from genloop.sdk.ops import ScoredCandidate

CAPTION = "a large red circle in the centre, black background"


def test_a_loop_that_sets_none_of_the_recipe_takes_all_of_it():
    # Given a loop naming only its prompt, model, seed and namespace
    loop = Loop(prompt=CAPTION, model="shapes", seed=7, namespace="n")
    # When the recipe is filled in
    filled = loop.with_recipe(shapes.RECIPE)
    # Then every recipe field is the recipe's and what the author set is kept
    assert filled.model_dump(include=set(shapes.RECIPE)) == shapes.RECIPE
    kept = (filled.prompt, filled.model, filled.seed, filled.namespace)
    assert kept == (CAPTION, "shapes", 7, "n")


@pytest.mark.parametrize("field,value", [("rounds", 2), ("evaluator", "shapes-clip"),
                                         ("target", None), ("steps", 20), ("refiner", "draft")])
def test_a_loop_that_sets_any_recipe_field_keeps_the_plain_defaults(field, value):
    # Given a loop that decides one part of the search itself (even to a default's value)
    loop = Loop(prompt=CAPTION, **{field: value})
    # Then the recipe is not mixed in: its target is on its evaluator's scale, its rounds fit
    # its steps and budget
    assert loop.with_recipe(shapes.RECIPE) is loop


def test_the_shapes_recipe_is_a_loop_within_best_of_24s_steps():
    assert set(shapes.RECIPE) <= RECIPE_FIELDS
    loop = Loop(prompt=CAPTION, **shapes.RECIPE)
    assert loop.budget == 24 * shapes.DEFAULT_STEPS


def test_a_bare_loop_runs_the_recipe_on_a_local_client(client):
    # Given the local back end, which serves shapes and its critic
    assert client.schema().served.recipes == {"shapes": shapes.RECIPE}
    # When a loop gives nothing but its prompt
    result = client.submit(Loop(prompt=CAPTION)).wait(timeout=300)
    # Then it ran the recipe: 4-step drafts judged by the critic (its scores say why), and it
    # stopped at the first round whose best reached the target, or gave up on the round the
    # recipe says when nothing had reached its floor, within the recipe's rounds
    assert result.status == "succeeded"
    scored: list[ScoredCandidate] = result.scored
    assert {c.steps for c in scored} == {4}
    assert all(c.details is not None for c in scored)
    rounds = sorted({c.round for c in scored})
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) <= shapes.RECIPE["rounds"]
    best_per_round = [max(c.score for c in scored if c.round == r) for r in rounds]
    assert all(b < shapes.RECIPE["target"] for b in best_per_round[:-1])
    give_up, best = shapes.RECIPE["give_up"], max(best_per_round)
    assert (best_per_round[-1] >= shapes.RECIPE["target"]
            or (len(rounds) == give_up["rounds"] and best < give_up["below"])
            or len(rounds) == shapes.RECIPE["rounds"])
    assert len(rounds) <= give_up["rounds"] or max(best_per_round[:give_up["rounds"]]) >= (
        give_up["below"])


def test_a_loop_that_sets_its_own_search_runs_it(client):
    result = client.submit(Loop(prompt=CAPTION, candidates=2, rounds=2, steps=2)).wait(
        timeout=300)
    assert result.status == "succeeded"
    assert {c.steps for c in result.scored} == {2}
    assert {c.round for c in result.scored} == {1, 2}
    assert all(c.details is None for c in result.scored)  # shapes-clip, the default evaluator
