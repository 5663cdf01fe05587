"""The draft refiner: cheap drafts first, then the best drafts finished with the same seeds."""

from __future__ import annotations

from genloop.sdk import Loop, RunStatus


def test_drafts_are_finished_best_first_with_the_same_seeds(client):
    loop = Loop(prompt="a red sneaker", candidates=2, rounds=3, steps=4, refiner="draft",
                draft_candidates=6, draft_steps=1)

    result = client.submit(loop).wait(timeout=180)

    assert result.status == RunStatus.SUCCEEDED
    drafts, first, second = result.rounds
    assert len(drafts.candidates) == 6 and {c.steps for c in drafts.candidates} == {1}
    ranked = [c.seed for c in sorted(drafts.candidates, key=lambda c: (-c.score, c.index))]
    assert [c.seed for c in first.candidates] == ranked[:2]   # only the winners are finished
    assert [c.seed for c in second.candidates] == ranked[2:4]
    assert {c.steps for c in first.candidates + second.candidates} == {4}
    assert result.compute.steps == 6 * 1 + 4 * 4
    finish = result.items("round-1/refine")
    assert finish[0].reason.startswith(f"finish draft seed {ranked[0]}: draft rank 1 of 6")


def test_a_budget_sizes_the_drafts_to_what_finishing_leaves():
    loop = Loop(prompt="x", candidates=8, rounds=3, steps=20, budget=24 * 20, refiner="draft")

    assert (loop.draft_steps, loop.draft_candidates) == (5, (480 - 2 * 8 * 20) // 5)
    assert loop.compile().node("round-1/generate").params["n"] == 32
