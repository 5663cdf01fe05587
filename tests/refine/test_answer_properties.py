"""Property: a refine answer that is refused changes nothing. Whatever an agent sends (any
prompt, seeds, steps, edits of shown or unknown images, strengths, too many images), either the
answer is taken, or it is refused and the run's events, its pause and its claim are as they
were, so a valid answer is still taken afterwards."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from genloop.sdk import GenerationRequest, GraphError, Loop, RefineAnswer, RefineRequest
from genloop.sdk.graph import RunLimits

pytestmark = pytest.mark.slow

#: Megapixel-steps of one tiny 2-step image with 3 retries; the run may spend 5 of them.
TINY = 32 * 32 / 1e6 * 2 * 4
EXAMPLES = 25
LIMITS = RunLimits(items=16, images=16, cost=5 * TINY, image_costs={
    "round-1/generate": TINY, "round-2/generate": TINY}, image_steps={
    "round-1/generate": 2, "round-2/generate": 2})


def _paused(client, seed: int):
    """A loop paused for its agent (a fresh seed: an identical loop replays the stored run)."""
    run = client.submit(Loop(prompt="a red circle", model="tiny", candidates=2, rounds=2,
                             steps=2, seed=seed, refiner="agent", refine_timeout=300,
                             limits=LIMITS))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for e in run.events(follow=False):
            if e.type == "refine.requested":
                return run, RefineRequest.model_validate_json(e.message)
        assert run.status().status in ("pending", "running"), "the run ended without pausing"
        time.sleep(0.05)
    raise AssertionError("the run did not pause within 120 s")


@st.composite
def requests(draw) -> dict:
    """One request; `init_image` is None, unknown text, or ("shown", i): the i-th image of
    whichever pause the answer goes to (pauses change as answers are taken)."""
    image = draw(st.one_of(st.none(), st.tuples(st.just("shown"), st.integers(0, 1)),
                           st.text(min_size=1, max_size=70)))
    return {
        "prompt": draw(st.text(max_size=40)),
        "seed": draw(st.integers(min_value=-1, max_value=2**31)),
        "round": 2,
        "steps": draw(st.one_of(st.none(), st.integers(min_value=1, max_value=200))),
        "init_image": image,
        "strength": draw(st.one_of(st.none(), st.floats(min_value=0.05, max_value=1.0))),
    }


def test_a_refused_answer_never_changes_the_run(client):
    state = {"paused": _paused(client, 0), "taken": 0, "refused": 0}

    # Shrinking would replay examples against pauses that have since moved on: generate only
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(requests(), min_size=1, max_size=4))
    def answer(sent: list[dict]) -> None:
        run, pause = state["paused"]
        shown = [c.artifact for c in pause.scored]
        for r in sent:
            if isinstance(r["init_image"], tuple):
                r["init_image"] = shown[r["init_image"][1] % len(shown)]
        before = [(e.id, e.type) for e in run.events(follow=False)]
        try:
            reply = RefineAnswer(requests=[GenerationRequest(**r) for r in sent])
            run.refine(reply)
        except (GraphError, ValidationError):
            state["refused"] += 1
            assert [(e.id, e.type) for e in run.events(follow=False)] == before
            return
        state["taken"] += 1  # a valid answer moves the run on: pause a fresh one
        assert run.wait(timeout=120).status == "succeeded"
        state["paused"] = _paused(client, state["taken"])

    answer()
    # Then the last pause, refused many times over, still takes a valid answer
    run, pause = state["paused"]
    run.refine([GenerationRequest(prompt="a red circle", seed=3, round=2)])
    assert run.wait(timeout=120).status == "succeeded"
    assert state["refused"] > 5 and state["taken"] + state["refused"] == EXAMPLES
