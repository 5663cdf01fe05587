"""A loop judged by each of the judges #38 added runs through the gateway, as through
``Client.local``: the shapes judges on both back ends, a tenant's ``ensemble`` of them,
``vlm-judge`` (the operator's hosted model, a recorded chat-completions server here) on a
gateway of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from server import LiveServer

from genloop import shapes
from genloop.evaluators import EvaluatorRegistry
from genloop.evaluators.registry import register_builtins
from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app
from genloop.sdk import Client, JudgeUsage, Loop, RunStatus

sys.path.insert(0, str(Path(__file__).parents[1] / "evaluators"))
from vlm_server import ChatServer, Reply, completion  # noqa: E402

CAPTION = "a large red circle in the centre, black background"


@pytest.mark.parametrize("judge", ["shapes-reader", "shapes-vqa"])
def test_a_loop_judged_by_a_shapes_judge_runs_through_the_gateway(stack, judge):
    # Given a tenant's HTTP client
    _, key = stack.tenant()
    client = stack.client(key)
    # When its loop names the judge
    loop = Loop(prompt=CAPTION, model=shapes.PIPELINE_NAME, evaluator=judge, steps=4,
                candidates=2, rounds=2, seed=0)
    result = client.submit(loop).wait(timeout=300)
    # Then every candidate was scored by that judge, each with the clause it doubts most
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.scored and {c.evaluator.split(":")[0] for c in result.scored} == {judge}
    assert all(c.details is not None and c.details.weakest for c in result.scored)
    assert all(0.0 <= c.score <= 100.0 for c in result.scored)
    # And a judge that runs on the worker bills nothing
    assert result.compute.judge is None and all(c.usage is None for c in result.scored)


def test_a_loop_judged_by_a_tenants_ensemble_runs_through_the_gateway(stack):
    # Given a tenant's HTTP client and weights fitted by fit_ensemble (options are data)
    _, key = stack.tenant()
    client = stack.client(key)
    options = {"weights": {"shapes-reader": 0.9, "shapes-clip": -0.4}, "bias": 0.3}
    # When its loop is judged by the ensemble of those judges
    loop = Loop(prompt=CAPTION, model=shapes.PIPELINE_NAME, evaluator="ensemble",
                evaluator_options=options, steps=4, candidates=2, rounds=2, seed=0)
    result = client.submit(loop).wait(timeout=300)
    # Then every candidate has the ensemble's probability and the reader's critique
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.scored and {c.evaluator.split("(")[0] for c in result.scored} == {"ensemble"}
    assert all(0.0 <= c.score <= 100.0 and c.details is not None for c in result.scored)


def test_a_loop_judged_by_vlm_judge_runs_through_the_gateway(tmp_path, resources, monkeypatch):
    from genloop.workers.backends.embedded import EmbeddedBackend
    from genloop.workers.models.resources import Resources

    # Given the operator's hosted model, fairly sure every image shows the prompt
    chat = ChatServer(lambda seen: Reply(completion("Yes", top={"Yes": 0.75, "No": 0.25})))
    monkeypatch.setenv("GENLOOP_VLM_BASE_URL", chat.url)
    monkeypatch.setenv("GENLOOP_VLM_MODEL", "test-vlm")
    # And a gateway whose workers build vlm-judge from that environment (a registry of its
    # own, so no other test's runtime keeps a judge of this server)
    judges = register_builtins(EvaluatorRegistry())
    backend = EmbeddedBackend(tmp_path / "home", threads=2, lease_ttl=5.0, resources=Resources(
        device="cpu", models=resources.models, evaluators=judges))
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    try:
        with LiveServer(create_app(backend, store, GatewaySettings())) as server:
            client = Client.http(server.url, api_key=store.create_key("t-vlm"))
            # When a tenant's one-round loop of two candidates names it
            loop = Loop(prompt="a red sneaker", model="tiny", evaluator="vlm-judge",
                        candidates=2, rounds=1, steps=1)
            result = client.submit(loop).wait(timeout=120)
            client.close()
    finally:
        backend.close()
        judges.get("vlm-judge", "cpu").close()
        chat.stop()
    # Then each candidate was asked about once and scored by P(yes)
    assert result.status == RunStatus.SUCCEEDED, result.error
    (round_1,) = result.rounds
    assert [c.score for c in round_1.candidates] == [pytest.approx(75.0)] * 2
    assert round_1.candidates[0].details.weakest == "a red sneaker"
    assert len(chat.seen) == 2
    # And the run's compute, read over HTTP, counts what the judge was billed for it
    assert result.compute.judge == JudgeUsage(calls=2, prompt_tokens=240, completion_tokens=2)
