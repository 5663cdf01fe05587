"""loop_quality's scripted agent answers a real loop's refine.requested through run.refine,
from the critique alone: fresh seeds with the weakest clause emphasised."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from genloop.sdk import Loop, RunStatus

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "loop_quality.py"


def _benchmark():
    spec = importlib.util.spec_from_file_location("benchmark_loop_quality", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripted_agent_answers_with_the_weakest_clause_emphasised(client):
    bench = _benchmark()
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
