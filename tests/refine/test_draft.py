"""The draft refiner: cheap drafts first, then the best drafts finished from their own images,
with the same seeds."""

from __future__ import annotations

from genloop.sdk import Loop, RunStatus
from genloop.sdk.ops import DRAFT_FINISH_STRENGTH, edit_steps, finish_strength


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
    finish = result.items("round-1/refine") + result.items("round-2/refine")
    artifact_of = {c.seed: c.artifact for c in drafts.candidates}
    assert [r.init_image for r in finish] == [artifact_of[s] for s in ranked[:4]]
    assert {(r.steps, r.strength) for r in finish} == {(4, finish_strength(4))}
    # an img2img finish at 4 steps and strength 0.375 runs int(1.5) = 1 step
    assert {(c.steps, c.denoised_steps) for c in first.candidates + second.candidates} \
        == {(4, 1)}
    assert result.compute.steps == 6 * 1 + 4 * 1
    assert finish[0].reason.startswith(f"finish draft seed {ranked[0]}: draft rank 1 of 6")


def test_the_finish_strength_always_runs_at_least_one_step():
    assert finish_strength(20) == DRAFT_FINISH_STRENGTH
    assert all(edit_steps(n, finish_strength(n)) >= 1 for n in range(1, 201))


def test_a_budget_sizes_the_drafts_to_what_finishing_leaves():
    loop = Loop(prompt="x", candidates=8, rounds=3, steps=20, budget=24 * 20, refiner="draft")

    finishes = 2 * 8 * int(20 * DRAFT_FINISH_STRENGTH)
    assert (loop.draft_steps, loop.draft_candidates) == (4, (480 - finishes) // 4)
    assert loop.compile().node("round-1/generate").params["n"] == 96
