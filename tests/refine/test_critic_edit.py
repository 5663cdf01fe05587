"""The critic-edit refiner: edits of the best images aimed at their weakest clause, plus fresh
seeds, each request saying why."""

from __future__ import annotations

from genloop.sdk import Loop, RunStatus


def test_the_best_images_are_edited_at_their_weakest_clause(client):
    loop = Loop(prompt="a red sneaker, white background", candidates=4, rounds=2, steps=4,
                keep=2, evaluator="clause-critic", refiner="critic-edit")

    result = client.submit(loop).wait(timeout=240)

    assert result.status == RunStatus.SUCCEEDED
    first, second = result.rounds
    best = sorted(first.candidates, key=lambda c: (-c.score, c.index))[:2]
    asked = result.items("round-1/refine")
    edits, fresh = asked[:2], asked[2:]
    for request, parent in zip(edits, best, strict=True):
        weak = parent.details.weakest
        assert request.init_image == parent.artifact
        assert f"weakest clause is {weak}" in request.reason
        assert request.prompt.endswith(f", {weak}")  # free text: the weak clause emphasised
    assert all(r.init_image is None and r.reason == "fresh seed" for r in fresh)
    made = sorted(second.candidates, key=lambda c: c.index)
    assert [c.init_image for c in made] == [best[0].artifact, best[1].artifact, None, None]
    assert result.compute.steps == 4 * 4 + 2 * int(4 * 0.6) + 2 * 4


def test_a_shapes_caption_is_edited_without_changing_its_words():
    from genloop.sdk import ClauseScore, Critique, RefineParams, ScoredCandidate
    from genloop.workers.ops.refine import critic_edit

    caption = "a small red star on the left, black background"
    parent = ScoredCandidate(
        index=0, prompt=caption, seed=3, model="shapes", artifact="abc.png", width=32,
        height=32, steps=20, score=40.0, evaluator="shapes-critic",
        details=Critique(clauses=[ClauseScore(clause="shape", text="star", score=12.0)],
                         weakest="shape"))

    asked = critic_edit([parent], RefineParams(prompt=caption, candidates=2, keep=1))

    assert asked[0].prompt == caption and asked[0].init_image == "abc.png"
    assert "weakest clause is shape 'star' (12.0/100)" in asked[0].reason
