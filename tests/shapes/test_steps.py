"""Training loops budgeted in seconds: the plan times its own steps and fits the schedule."""

from __future__ import annotations

import pytest

from genloop.shapes.training.steps import SETTLE_STEPS, TIMED_STEPS, StepPlan


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(plan: StepPlan, clock: FakeClock, seconds_per_step: float) -> int:
    step = 0
    while step < plan.total:
        clock.now += seconds_per_step
        plan.after_step(step)
        step += 1
    return step


def test_without_a_budget_the_loop_runs_its_steps() -> None:
    clock = FakeClock()
    plan = StepPlan(50, warmup=10, clock=clock)
    assert run(plan, clock, 1.0) == 50
    assert plan.summary() == {"steps": 50, "seconds_per_step": None}


@pytest.mark.parametrize(("per_step", "expected"), [(0.01, 1000), (0.1, 100)])
def test_a_budget_sets_the_length_from_the_timed_steps(per_step: float, expected: int) -> None:
    # Given a 10-second budget and steps of a fixed duration
    clock = FakeClock()
    plan = StepPlan(50, warmup=40, seconds=10.0, clock=clock)
    # When the loop runs, the plan measures the steps and runs as many as fit
    assert run(plan, clock, per_step) == pytest.approx(expected, abs=1)
    assert plan.seconds_per_step == pytest.approx(per_step)
    assert plan.total * per_step == pytest.approx(10.0, abs=per_step)


def test_a_budget_too_small_still_runs_the_minimum_and_a_cap_holds() -> None:
    clock = FakeClock()
    short = StepPlan(50, warmup=40, seconds=0.5, min_steps=40, clock=clock)
    assert run(short, clock, 0.1) == 40
    clock = FakeClock()
    capped = StepPlan(50, warmup=10, seconds=1000.0, max_steps=300, clock=clock)
    assert run(capped, clock, 0.1) == 300
    assert SETTLE_STEPS + TIMED_STEPS < 40  # the timing ends inside warm-up, as planned


def test_learning_rate_warms_up_linearly_then_decays_to_zero_over_the_fitted_length() -> None:
    clock = FakeClock()
    plan = StepPlan(50, warmup=40, seconds=10.0, clock=clock)
    assert plan.lr_factor(0) == pytest.approx(1 / 40)
    assert plan.lr_factor(39) == pytest.approx(1.0)
    run(plan, clock, 0.01)
    assert abs(plan.total - 1000) <= 1
    assert plan.lr_factor(40) == pytest.approx(1.0)
    assert plan.lr_factor((40 + plan.total) // 2) == pytest.approx(0.5, abs=3e-3)
    assert plan.lr_factor(plan.total - 1) < 1e-4
