"""The clause critic: prompts split into clauses, each scored, the weakest named."""

from __future__ import annotations

import pytest

from genloop import shapes
from genloop.evaluators import get_evaluator
from genloop.evaluators.clauses import free_text_clauses, split_clauses
from genloop.sdk import Loop, RunStatus

CAPTION = "a small green star on the left, gray background"


def _shipped_render(attrs):
    """``attrs`` drawn, unjittered, in the world the shipped shapes-clip was trained on."""
    from genloop.shapes import dataset

    return dataset.render(attrs)


def test_a_shapes_caption_splits_into_its_attributes_with_one_clause_changed_alternatives():
    clauses = split_clauses(CAPTION)

    assert [(c.name, c.text) for c in clauses] == [
        ("colour", "green"), ("shape", "star"), ("size", "small"), ("position", "left"),
        ("background", "gray"),
    ]
    wanted = shapes.parse_caption(CAPTION).model_dump()
    for clause in clauses:
        assert clause.alternatives
        for alt in clause.alternatives:
            changed = {k for k, v in shapes.parse_caption(alt).model_dump().items()
                       if v != wanted[k]}
            assert changed == {clause.name}
    assert len(clauses[0].alternatives) == 5  # six colours, less the prompt's own


PAIR = "a small yellow circle above a large green triangle, black background"


def test_a_two_object_caption_splits_per_object_so_a_critic_can_say_which_is_wrong():
    clauses = split_clauses(PAIR)

    assert [(c.name, c.text) for c in clauses] == [
        ("first.size", "small"), ("first.colour", "yellow"), ("first.shape", "circle"),
        ("relation", "above"), ("second.size", "large"), ("second.colour", "green"),
        ("second.shape", "triangle"), ("background", "black"),
    ]
    wanted = shapes.parse_caption(PAIR)
    for clause in clauses:
        owner, _, field = clause.name.rpartition(".")
        assert clause.alternatives
        for alt in clause.alternatives:
            other = shapes.parse_caption(alt)
            assert other.canonical() != wanted.canonical()   # another picture
            changed = {name for name in shapes.PAIR_CLAUSES
                       if _clause_value(other, name) != _clause_value(wanted, name)}
            assert changed == {clause.name}


def _clause_value(scene, name: str) -> str:
    owner, _, field = name.rpartition(".")
    return getattr(getattr(scene, owner) if owner else scene, field)


def test_a_relation_flip_between_identical_objects_is_no_alternative():
    same = "a small red star left of a small red star, gray background"

    relation = next(c for c in split_clauses(same) if c.name == "relation")

    assert sorted(shapes.parse_caption(a).relation for a in relation.alternatives) == [
        "above", "below"]


def test_the_critic_names_the_object_a_two_object_image_gets_wrong():
    critic = get_evaluator("shapes-critic", device="cpu")
    truth = shapes.parse_caption(PAIR)
    image = _shipped_render(truth)
    wrong_second = truth.model_copy(
        update={"second": truth.second.model_copy(update={"colour": "blue"})})

    right = critic.score([image], PAIR)
    wrong = critic.score([image], wrong_second.caption())

    assert right.values[0] > wrong.values[0]
    assert wrong.details[0].weakest == "second.colour"
    assert [c.clause for c in right.details[0].clauses] == list(shapes.PAIR_CLAUSES)


def test_free_text_splits_on_commas_and_and_with_articles_dropped():
    assert [c.text for c in split_clauses("A red bicycle, a wooden fence and a dog with a hat")] \
        == ["red bicycle", "wooden fence", "dog", "hat"]
    assert all(not c.alternatives for c in free_text_clauses("a cat, at night"))


def test_the_critic_names_the_clause_an_image_gets_wrong():
    critic = get_evaluator("shapes-critic", device="cpu")
    truth = shapes.sample(shapes.heldout_seeds(1)[0])
    wrong_colour = truth.attributes.model_copy(
        update={"colour": "blue" if truth.attributes.colour != "blue" else "red"})

    image = _shipped_render(truth.attributes)
    right = critic.score([image], truth.caption)
    wrong = critic.score([image], wrong_colour.caption())

    assert right.values[0] > 90 > 50 > wrong.values[0]
    assert wrong.details[0].weakest == "colour"
    assert [c.clause for c in right.details[0].clauses] == [
        "colour", "shape", "size", "position", "background"]


def test_the_critic_ranks_a_right_image_above_one_wrong_in_a_single_attribute():
    critic = get_evaluator("shapes-critic", device="cpu")
    plain = get_evaluator("shapes-clip", device="cpu")
    truth = shapes.sample(shapes.heldout_seeds(1, start=3)[0])
    images = [_shipped_render(truth.attributes)]
    for name in ("shape", "position", "size"):
        other = truth.attributes.model_copy(
            update={name: next(v for v in {"shape": shapes.dataset.SHAPES,
                                            "position": shapes.dataset.POSITIONS,
                                            "size": shapes.dataset.SIZES}[name]
                               if v != getattr(truth.attributes, name))})
        images.append(_shipped_render(other))

    scores = critic.score(images, truth.caption)

    assert scores.values[0] == max(scores.values)
    assert len(plain.score(images, truth.caption).values) == len(images)


def test_a_loop_carries_the_critique_of_every_candidate(client):
    result = client.submit(Loop(prompt="a red sneaker, white background", candidates=2,
                                rounds=1, steps=2, evaluator="clause-critic")).wait(timeout=120)

    assert result.status == RunStatus.SUCCEEDED
    for c in result.scored:
        assert [k.clause for k in c.details.clauses] == ["red sneaker", "white background"]
        assert c.details.weakest in {"red sneaker", "white background"}


def test_a_base_that_cannot_embed_text_is_refused():
    from genloop.evaluators.critic import ClauseCritic
    from genloop.evaluators.registry import FunctionEvaluator
    from genloop.sdk.errors import Permanent

    with pytest.raises(Permanent, match="CLIP-like"):
        ClauseCritic(FunctionEvaluator("brightness", lambda images, text: [0.0] * len(images)))
