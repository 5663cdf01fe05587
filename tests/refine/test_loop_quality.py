"""benchmarks/loop_quality.py's parts: the scripted agent answers a real loop's
refine.requested through run.refine, from the critique alone (fresh seeds with the weakest
clause emphasised); the target modes search the budget every mode gets, and stop at the
critic's target."""

from __future__ import annotations

import pytest
from benchmark_util import load_benchmark

from genloop import shapes
from genloop.sdk import Loop, RunStatus


def test_the_scripted_agent_answers_with_the_weakest_clause_emphasised(client):
    bench = load_benchmark("loop_quality")
    loop = Loop(prompt="a red sneaker, white background", candidates=2, rounds=2, steps=2,
                refiner="agent", evaluator="clause-critic", refine_timeout=120)

    with bench.ScriptedAgent(bench.weakest_clause_policy, poll=0.05) as agent:
        run = client.submit(loop)
        agent.watch(run)
        result = run.wait(timeout=120)

    assert result.status == RunStatus.SUCCEEDED and agent.answered == 1
    first, second = result.rounds
    best = max(first.candidates, key=lambda c: c.score)
    weak = next(c.text for c in best.details.clauses if c.clause == best.details.weakest)
    assert [c.prompt for c in second.candidates] == [f"{loop.prompt}, {weak}"] * 2
    assert not {c.seed for c in second.candidates} & {c.seed for c in first.candidates}


@pytest.mark.parametrize("mode", ["target", "target-drafts"])
def test_a_target_mode_searches_the_common_budget_and_stops_at_the_critics_target(client, mode):
    bench = load_benchmark("loop_quality")
    caption = "a small red circle left of a large blue square, black background"
    budget = 2 * 2 * 10  # rounds x candidates x steps: what best-of-n spends
    each = 10 if mode == "target" else Loop(prompt=caption, steps=10, refiner="draft").draft_steps

    def run(target: float):
        loop = bench.loop_for(mode, caption, 2, 2, 10, target=target)
        assert loop.model == shapes.PIPELINE_NAME
        return client.submit(loop).wait(timeout=120)

    reached, missed = run(0.0), run(101.0)  # every score reaches 0; none reaches 101

    assert reached.status == missed.status == RunStatus.SUCCEEDED
    assert all(c.details is not None for c in reached.scored)  # judged by the clause critic
    assert len(reached.rounds) == 1 and reached.compute.images == 2
    assert {c.steps for c in missed.scored} == {each}
    assert missed.compute.steps == budget and len(missed.rounds) == budget // (2 * each)


def test_the_calibration_prompts_are_the_same_mix_drawn_elsewhere():
    bench = load_benchmark("loop_quality")
    benchmark, calibration = bench.benchmark_prompts(20), bench.benchmark_prompts(20, True)

    def sizes(prompts):
        return {name: sum(1 for n, _ in prompts if n == name) for name, _ in prompts}

    assert sizes(calibration) == sizes(benchmark) == {"two": 12, "novel": 4, "small": 4}
    assert len({p for _, p in benchmark} & {p for _, p in calibration}) <= 2


def test_every_wrong_kept_image_is_counted_under_one_reason(client):
    bench = load_benchmark("loop_quality")
    prompts = bench.benchmark_prompts(5)[:3]

    # A target no score reaches: each loop spends its budget, so none stopped on a wrong image
    report = bench.run_mode(client, "target-drafts-reader", prompts, 1, 2, 8, target=101.0)

    assert sum(report.misses.values()) == report.correct.count(False)
    assert set(report.misses) <= {"none_right_spent", "right_not_kept"}
