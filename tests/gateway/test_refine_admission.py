"""A refine answer goes through admission like a submit: costed at what it asks, its strings
capped and storable, its edits limited to what the pause showed. A refused answer is refused
before it is claimed, so the pause stays open for a valid answer."""

from __future__ import annotations

import json

import httpx
from test_safety import error, messages
from test_uploads import image_bytes, upload

from genloop.evaluators.pricing import PASS_COST
from genloop.gateway import TenantLimits
from genloop.sdk import Loop, RefineRequest, RunStatus

#: Megapixel-steps of one tiny 2-step image with its 3 retries: what the plan counts.
TINY = 32 * 32 / 1e6 * 2 * 4
#: ... and of scoring the loop's 4 images, each with the score op's 3 retries.
SCORING = 4 * PASS_COST * 4
#: A paused 2x2 loop is planned at 4 images; its limit leaves room for a little more.
LIMITS = TenantLimits(max_cost_per_run=5 * TINY + SCORING)


def _paused(stack, limits: TenantLimits = LIMITS):
    _, key = stack.tenant(limits)
    client = stack.client(key)
    run = client.submit(Loop(prompt="a red circle", model="tiny", candidates=2, rounds=2,
                             steps=2, refiner="agent", refine_timeout=120))
    pause = None
    while pause is None:
        pause = next((RefineRequest.model_validate_json(e.message) for e in run.events()
                      if e.type == "refine.requested"), None)
    return key, run, pause


def _answer(stack, key: str, run_id: str, body: str) -> httpx.Response:
    return httpx.post(f"{stack.url}/v1/runs/{run_id}/refine", content=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}",
                               "Content-Type": "application/json"})


def _request(**fields) -> dict:
    return {"prompt": "a red circle", "seed": 5, "round": 2, **fields}


def test_an_answer_asking_more_steps_than_the_cost_limit_allows_is_refused(stack):
    # Given a paused loop whose tenant may spend 5 tiny images' worth, planned at 4
    key, run, pause = _paused(stack)
    # When the agent asks 200 steps for each image of the next round
    greedy = _answer(stack, key, run.id, json.dumps({"requests": [
        _request(steps=200), _request(steps=200, seed=6)]}))
    # Then it is refused with the figures, and a modest raise (3 steps, within the limit)
    # is still taken: the pause stayed open
    body = error(greedy, 422, "invalid_graph")
    assert "megapixel-steps more than its round was planned at" in messages(body)
    modest = _answer(stack, key, run.id, json.dumps({"requests": [
        _request(steps=3), _request(steps=3, seed=6)]}))
    assert modest.status_code == 200, modest.text
    result = run.wait(timeout=120)
    assert result.status == RunStatus.SUCCEEDED
    assert [c.steps for c in result.rounds[1].candidates] == [3, 3]


def test_answers_are_checked_like_a_submit_and_leave_the_pause_open(stack):
    key, run, pause = _paused(stack, TenantLimits())
    shown = pause.scored[0].artifact
    bad = {
        "a prompt past the cap": [_request(prompt="x" * 10_000)],
        "a lone surrogate": None,  # written by hand below: json.dumps would escape it
        "an image the pause did not show": [_request(init_image="0" * 64 + ".png",
                                                     strength=0.5)],
        "strength without an image": [_request(strength=0.5)],
        "more images than the round makes": [_request(seed=s) for s in range(3)],
    }
    for why, requests in bad.items():
        body = ('{"requests": [{"prompt": "\\ud800", "seed": 1, "round": 2}]}'
                if requests is None else json.dumps({"requests": requests}))
        refused = _answer(stack, key, run.id, body)
        assert refused.status_code == 422, (why, refused.status_code, refused.text[:300])
        assert len(refused.content) < 2_000, why  # the long prompt is not echoed
    # and a mask that is another tenant's upload is answered as a key that does not exist
    _, other = stack.tenant()
    theirs = upload(stack.url, other, image_bytes()).json()["key"]
    refused = _answer(stack, key, run.id, json.dumps({"requests": [
        _request(init_image=shown, strength=0.5, mask=theirs)]}))
    error(refused, 404, "not_found")
    # and after all of them a valid edit of a shown candidate, masked by the tenant's own
    # upload, is taken and runs
    mine = upload(stack.url, key, image_bytes()).json()["key"]
    ok = _answer(stack, key, run.id, json.dumps({"requests": [
        _request(init_image=shown, strength=0.5, mask=mine)]}))
    assert ok.status_code == 200, ok.text
    assert run.wait(timeout=120).status == RunStatus.SUCCEEDED
