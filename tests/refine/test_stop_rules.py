"""benchmarks/stop_rules.py's replay: a rule replayed on a loop run to its whole budget keeps the
draft, and draws the drafts, that the loop stopped by that rule keeps and draws; each rule stops
where it says."""

from __future__ import annotations

from itertools import pairwise

from benchmark_util import load_benchmark

from genloop import shapes
from genloop.sdk import Loop, RunStatus

#: A prompt whose loop (seed 0) finds its best draft in round 3: a replay must look past round 2
CAPTION = "a small cyan square in the centre, white background"


def _loop(**fields) -> Loop:
    return Loop(prompt=CAPTION, seed=0, model=shapes.PIPELINE_NAME, evaluator="shapes-reader",
                steps=4, candidates=4, rounds=4, **fields)


def test_a_replayed_target_keeps_what_the_loop_stopped_at_it_keeps(client):
    bench = load_benchmark("stop_rules")
    # Given a loop run to its whole budget, and a target its best reaches after round 2 or later
    whole = client.submit(_loop()).wait(timeout=300)
    assert whole.status == RunStatus.SUCCEEDED
    rec = bench.recording(client, "two", CAPTION, whole)
    bests = [max(d.score for d in rec.drafts if d.round <= r) for r in (1, 2, 3, 4)]
    target = next((b for before, b in pairwise(bests) if b > before), bests[0])
    assert bests.index(target) >= 1  # the loop stops after a later round than the first
    # When the same loop runs with that target
    stopped = client.submit(_loop(target=target)).wait(timeout=300)
    # Then the replay kept the draft the loop kept, after as many drafts
    kept, drawn = bench.replay(rec, bench.Rule(target=target))
    assert stopped.best is not None
    assert (kept.round, kept.index) == (stopped.best.round, stopped.best.index)
    assert drawn == len(stopped.scored) == 4 * (bests.index(target) + 1)


def test_each_rule_stops_where_it_says():
    bench = load_benchmark("stop_rules")
    scores = {1: [10.0, 30.0], 2: [40.0, 20.0], 3: [96.0, 96.0], 4: [99.0, 5.0]}
    rec = bench.Recording("two", CAPTION, [
        bench.Draft(r, i, s, right=s > 90) for r, row in scores.items() for i, s in enumerate(row)])

    def stop(**rule):
        kept, drawn = bench.replay(rec, bench.Rule(**rule))
        return kept.round, kept.index, drawn

    assert stop() == (4, 0, 8)  # no rule: the whole budget, the best of all
    assert stop(target=95.0) == (3, 0, 6)  # the first round that reaches it, earliest of equals
    assert stop(rounds=2) == (2, 0, 4)
    assert stop(give_up_after=2, give_up_below=50.0) == (2, 0, 4)  # nothing reached 50 by then
    assert stop(give_up_after=2, give_up_below=30.0) == (4, 0, 8)  # 40 had
    outcome = bench.outcome([rec], bench.Rule(target=95.0))
    assert (outcome.all_correct, outcome.drafts, outcome.right) == (1.0, 6.0, [True])


def test_the_recording_runs_the_recipe_without_its_stopping_rule_and_replays_the_recipes():
    bench = load_benchmark("stop_rules")
    # The recording: every field of the recipe but those that stop it
    loop = bench.unstopped_loop(CAPTION, seed=0)
    assert loop.target is None and loop.give_up is None
    assert (loop.rounds, loop.candidates, loop.steps) == tuple(
        shapes.RECIPE[k] for k in ("rounds", "candidates", "steps"))
    # And the recipe's own rule, replayed, stops where the recipe's loop would
    rule, give_up = bench.recipe_rule(), shapes.RECIPE["give_up"]
    assert (rule.target, rule.rounds) == (shapes.RECIPE["target"], shapes.RECIPE["rounds"])
    assert (rule.give_up_after, rule.give_up_below) == (give_up["rounds"], give_up["below"])
