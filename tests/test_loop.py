"""Loops end to end on the tiny models: rounds, best candidate, early stop, reuse."""

from __future__ import annotations

from genloop.sdk import Loop, NodeStatus, RunStatus


def test_loop_runs_every_round_and_reports_the_best(client):
    loop = Loop(prompt="a red sneaker", model="tiny", evaluator="clip", candidates=4, rounds=3,
                steps=2, keep=2)

    run = client.submit(loop)
    result = run.wait(timeout=180)

    assert result.status == RunStatus.SUCCEEDED
    rounds = result.rounds
    assert [r.round for r in rounds] == [1, 2, 3]
    assert all(len(r.candidates) == 4 for r in rounds)
    seeds_r1 = {c.seed for c in rounds[0].candidates}
    assert seeds_r1 == {0, 1, 2, 3}
    assert not seeds_r1 & {c.seed for c in rounds[1].candidates}  # refine asked for new seeds
    best = result.best
    assert best.score == max(r.best_score for r in rounds)
    assert client.read_artifact(best.artifact).startswith(b"\x89PNG")


def test_target_reached_halts_the_loop_and_skips_later_rounds(client):
    result = client.submit(
        Loop(prompt="a cat", model="tiny", evaluator="clip", candidates=2, rounds=3, steps=2,
             target=0.0)
    ).wait(timeout=120)

    assert result.status == RunStatus.SUCCEEDED
    assert [r.round for r in result.rounds] == [1]
    assert result.outputs["round-1/refine"].status == NodeStatus.SUCCEEDED
    assert {result.outputs[f"round-{r}/{op}"].status
            for r in (2, 3) for op in ("generate", "score")} == {NodeStatus.SKIPPED}


def test_resubmitting_a_finished_loop_generates_nothing(client):
    loop = Loop(prompt="a dog", model="tiny", evaluator="clip", candidates=2, rounds=2, steps=2)
    first = client.submit(loop).wait(timeout=120)

    run = client.submit(loop)
    second = run.wait(timeout=120)

    events = list(run.events(follow=False))
    assert not [e for e in events if e.type in ("instance.started", "progress")]
    assert second.best == first.best
