"""Agent-driven refine over the SDK: the loop pauses, shows the agent its scored candidates,
and makes what the agent asks; one answer only; no answer falls back."""

from __future__ import annotations

import asyncio
import threading

import pytest
from wait_util import until

from genloop.sdk import (
    GenerationRequest,
    Loop,
    RefineConflict,
    RefineRequest,
    RunStatus,
)
from genloop.sdk.aio import AsyncRun, ThreadedBackend


def agent_loop(timeout: float = 120.0) -> Loop:
    return Loop(prompt="a red sneaker, white background", candidates=2, rounds=2, steps=2,
                refiner="agent", evaluator="clause-critic", refine_timeout=timeout)


def asked(run) -> RefineRequest:
    for event in run.events():
        if event.type == "refine.requested":
            return RefineRequest.model_validate_json(event.message)
    raise AssertionError("the run ended without asking")


def test_an_agent_answers_and_the_loop_makes_what_it_asked(client):
    run = client.submit(agent_loop())

    request = asked(run)
    assert request.node_id == "round-1/refine" and len(request.scored) == 2
    assert all(c.details is not None and c.embedding is None for c in request.scored)
    best = max(request.scored, key=lambda c: c.score)
    answer = run.refine([
        GenerationRequest(prompt=request.prompt, seed=1234, round=99),
        GenerationRequest(prompt=request.prompt + ", red", seed=5, round=99,
                          init_image=best.artifact, strength=0.5,
                          reason=f"fix {best.details.weakest}"),
    ])
    with pytest.raises(RefineConflict, match="already has its answer"):
        run.refine([GenerationRequest(prompt="x", seed=1, round=2)], node_id=answer.node_id)
    with pytest.raises(RefineConflict, match="has no refine waiting for an answer"):
        run.refine([GenerationRequest(prompt="x", seed=1, round=2)])
    result = run.wait(timeout=120)

    assert answer.node_id == "round-1/refine"
    assert result.status == RunStatus.SUCCEEDED
    made = sorted(result.rounds[1].candidates, key=lambda c: c.index)
    assert [(c.seed, c.round, c.init_image) for c in made] == [
        (1234, 2, None), (5, 2, best.artifact)]
    assert result.compute.steps == 2 * 2 + 2 + 1  # the edit ran 2 x 0.5 steps


def test_no_answer_within_the_timeout_falls_back(client):
    run = client.submit(agent_loop(timeout=0.5))

    result = run.wait(timeout=120)

    assert result.status == RunStatus.SUCCEEDED
    assert len(result.rounds[1].candidates) == 2  # seed-search decided
    with pytest.raises(RefineConflict):
        run.refine([GenerationRequest(prompt="late", seed=1, round=2)])


def test_an_answer_nobody_asked_for_is_refused(client):
    run = client.submit(Loop(prompt="a cat", candidates=1, rounds=2, steps=2))
    run.wait(timeout=120)

    with pytest.raises(RefineConflict, match="has not asked"):
        run.refine([GenerationRequest(prompt="a cat", seed=1, round=2)],
                   node_id="round-1/refine")


def test_an_async_agent_answers(client):
    async def main():
        backend = ThreadedBackend(client.backend)
        run = AsyncRun(backend, await backend.submit(agent_loop(), None))
        async for event in run.events():
            if event.type == "refine.requested":
                break
        await run.refine([GenerationRequest(prompt="a red sneaker", seed=77, round=2)])
        return await run.wait(timeout=120)

    result = asyncio.run(main())

    assert [c.seed for c in result.rounds[1].candidates] == [77]


def test_loops_waiting_for_their_agents_hold_no_worker_thread(tmp_path, resources):
    """With one worker thread, a second loop still runs and pauses while the first waits."""
    from genloop.sdk import Client

    with Client.local(home=tmp_path / "home", threads=1, resources=resources,
                      lease_ttl=5.0) as one_thread:
        runs = [one_thread.submit(agent_loop().model_copy(update={"seed": seed}))
                for seed in (1, 2)]
        requests = [asked(run) for run in runs]  # both pause: the first holds no thread
        for run, request in zip(runs, requests, strict=True):
            run.refine([GenerationRequest(prompt=request.prompt, seed=9, round=2)])
        results = [run.wait(timeout=120) for run in runs]

    assert [r.status for r in results] == [RunStatus.SUCCEEDED] * 2
    assert [c.seed for r in results for c in r.rounds[1].candidates] == [9, 9]


def test_each_runtime_watches_for_answers_and_stops_when_it_closes(tmp_path, resources):
    """The watch for agents' answers belongs to a runtime's executor, not to the process: a
    second client waits on a watch of its own, and closing a client ends its watch's thread
    (which would otherwise read a closed store)."""
    from genloop.sdk import Client

    def watches() -> int:
        return sum(t.name == "genloop-agent-answers" for t in threading.enumerate())

    before = watches()
    clients = [Client.local(home=tmp_path / f"home{i}", threads=1, resources=resources)
               for i in (1, 2)]
    try:
        for client in clients:
            asked(client.submit(agent_loop()))
        until(lambda: watches() == before + 2, "a watch per waiting runtime")
    finally:
        clients[0].close()
    until(lambda: watches() == before + 1, "the closed runtime's watch to end")
    clients[1].close()
    until(lambda: watches() == before, "every watch to end")
