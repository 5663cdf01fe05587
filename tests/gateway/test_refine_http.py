"""Agent-driven refine over HTTP: POST /v1/runs/{id}/refine answers a paused loop once; a
second answer is 409."""

from __future__ import annotations

import httpx

from genloop.sdk import GenerationRequest, Loop, RefineConflict, RefineRequest, RunStatus


def test_an_agent_answers_over_http_and_a_second_answer_is_409(stack):
    _, key = stack.tenant()
    client = stack.client(key)
    run = client.submit(Loop(prompt="a red sneaker", candidates=2, rounds=2, steps=2,
                             refiner="agent", refine_timeout=120))
    request = next(RefineRequest.model_validate_json(e.message) for e in run.events()
                   if e.type == "refine.requested")

    answer = run.refine([GenerationRequest(prompt=request.prompt, seed=4242, round=2)])
    again = httpx.post(f"{stack.url}/v1/runs/{run.id}/refine",
                       headers={"Authorization": f"Bearer {key}"},
                       json={"requests": [{"prompt": "x", "seed": 1, "round": 2}]})
    result = run.wait(timeout=120)

    assert answer.node_id == request.node_id
    assert again.status_code == 409 and again.json()["code"] == "refine_conflict"
    assert result.status == RunStatus.SUCCEEDED
    assert [c.seed for c in result.rounds[1].candidates] == [4242]
    try:
        run.refine([GenerationRequest(prompt="x", seed=2, round=2)])
    except RefineConflict:
        pass
    else:
        raise AssertionError("a third answer was accepted")


def test_a_graph_cannot_edit_another_tenants_image(stack):
    from genloop.sdk import Graph
    from genloop.sdk.errors import GraphError

    # Given tenant A made an image
    _, key_a = stack.tenant()
    a = stack.client(key_a)
    g = Graph()
    g.generate("a red sneaker", n=1, steps=2, id="gen")
    made = a.submit(g).wait(timeout=120).items("gen")[0]
    _, key_b = stack.tenant()
    b = stack.client(key_b)

    # When tenant B submits an edit of it, Then it is refused as an unknown artifact
    edit = Graph()
    edit.generate("a blue sneaker", n=1, steps=2, init_image=made.artifact, id="gen")
    try:
        b.submit(edit)
    except GraphError as exc:
        assert "no image" in str(exc)
    else:
        raise AssertionError("tenant B edited tenant A's image")
    # while A may edit its own
    mine = Graph()
    mine.generate("a blue sneaker", n=1, steps=2, init_image=made.artifact, id="gen")
    assert a.submit(mine).wait(timeout=120).status == RunStatus.SUCCEEDED
