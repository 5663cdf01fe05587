"""The third round of hostile probes through the live gateway (uploads and refine answers have
tests of their own): each finding as the plain HTTP request that showed it, now refused or
answered safely."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from test_safety import error

from genloop.gateway import TenantLimits
from genloop.sdk import Graph, Loop
from genloop.sdk.wire import ApiError


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def post(url: str, key: str, body: bytes | str) -> httpx.Response:
    return httpx.post(f"{url}/v1/runs", content=body, timeout=30,
                      headers={**auth(key), "Content-Type": "application/json"})


def slow_run(stack, key: str, sleep: float = 30) -> str:
    g = Graph()
    g.add("gw-wait", params={"sleep": sleep}, id="wait")
    response = post(stack.url, key, g.model_dump_json())
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_brand_palette_is_capped_at_admission(stack):
    from genloop.evaluators.options import MAX_PALETTE

    _, key = stack.tenant(TenantLimits(evaluators=["clip", "brand-palette", "composite"]))
    palette = [f"#{i:06x}" for i in range(2_000)]
    loop = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="composite",
                evaluator_options={"weights": {"clip": 1, "brand-palette": 0.2},
                                   "options": {"brand-palette": {"palette": palette}}})
    response = post(stack.url, key, loop.model_dump_json())
    body = ApiError.model_validate_json(response.content)
    assert response.status_code == 422 and body.code == "invalid_graph"
    assert f"2000 colours; 1 to {MAX_PALETTE} allowed" in body.message
    assert len(response.content) < 2_000


def test_evaluator_work_counts_against_the_tenants_cost_limit(stack):
    from genloop.evaluators.pricing import PASS_COST, score_cost

    # Given a tenant whose runs may cost 10 megapixel-steps, and one tiny image (0.008 of
    # them) scored by 150 score nodes, each with a brand colour of its own: each node is a
    # result key of its own and builds an evaluator of its own
    _, key = stack.tenant(TenantLimits(max_cost_per_run=10,
                                       evaluators=["clip", "brand-palette", "composite"]))
    g = Graph()
    gen = g.generate("p", n=1, model="tiny", steps=2, id="gen")
    for node in range(150):
        g.score(gen, text="p", evaluator="composite", id=f"score-{node}", options={
            "weights": {"clip": 1, "brand-palette": 0.5},
            "options": {"brand-palette": {"palette": [f"#{node:06x}"]}}})
    # When it is submitted, it is refused: the scoring is counted, each part of each score
    # with the score op's retries, not just the one image
    body = error(post(stack.url, key, g.model_dump_json()), 429, "cost_limit")
    per_image = score_cost("composite", g.nodes[1].params["options"])
    assert per_image == pytest.approx(PASS_COST * (2 + 1 / 10_000))
    assert body.details["requested"] == pytest.approx(32 * 32 / 1e6 * 2 * 4
                                                      + 150 * per_image * 4)
    # and a run that scores its image a few times is still taken
    few = Graph(nodes=g.nodes[:4])
    assert post(stack.url, key, few.model_dump_json()).status_code == 201


def test_a_campaign_through_the_gateway_is_admitted_and_costed_like_any_submit(stack,
                                                                              tmp_path):
    from genloop.campaign import parse_spec, run
    from genloop.sdk.errors import ClientError

    # Given a tenant whose runs may cost 0.4 megapixel-steps, and a campaign whose loops
    # make 2 tiny images (0.016) and score each with clip and the brand palette (0.48)
    name, key = stack.tenant(TenantLimits(max_cost_per_run=0.4))
    spec = parse_spec({
        "name": "branded", "axes": {"product": ["a red ball", "a blue box"]},
        "template": "{product}", "formats": [{"name": "1:1", "width": 64, "height": 64}],
        "brand": {"palette": ["#ff0000"], "weight": 20},
        "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 2,
                 "steps": 2},
    })
    # When it is run through the gateway
    with pytest.raises(ClientError) as refused:
        run(spec, stack.client(key), out=tmp_path / "out")
    # Then its first variant is refused for what its scoring costs, and nothing started
    assert (refused.value.status_code, refused.value.code) == (429, "cost_limit")
    assert stack.store.runs(name) == []


def test_errors_quote_a_long_value_only_in_part(stack):
    _, key = stack.tenant()
    for spec in (Loop(prompt="p", rounds=1, candidates=1, model="m" * 50_000),
                 Loop(prompt="p", rounds=1, candidates=1, model="tiny",
                      evaluator="e" * 50_000)):
        response = post(stack.url, key, spec.model_dump_json())
        assert response.status_code == 422, response.text[:300]
        assert len(response.content) < 3_000 and "(50000 characters)" in response.text
    # Nor do the answers that quote the path, a header or a field's name; a value with both
    # kinds of quote in it is cut too
    long, quoted = "x" * 7_000, "a'b\"" * 1_500
    auth_only = auth(key)
    answers = {
        "run id": httpx.get(f"{stack.url}/v1/runs/{long}", headers=auth_only),
        "quoted run id": httpx.get(f"{stack.url}/v1/runs/{quoted}", headers=auth_only),
        "artifact key": httpx.get(f"{stack.url}/v1/artifacts/{long}", headers=auth_only),
        "content type": httpx.post(f"{stack.url}/v1/artifacts", content=b"x",
                                   headers={**auth_only, "Content-Type": long}),
        "field name": post(stack.url, key, json.dumps({"kind": "loop", "prompt": "p",
                                                       long: 1})),
    }
    for what, response in answers.items():
        assert response.status_code in (404, 415, 422), (what, response.status_code)
        assert len(response.content) < 1_000, (what, len(response.content))


def test_a_chunked_body_over_the_cap_is_413_without_its_bytes(stack):
    _, key = stack.tenant()

    def chunks():
        for _ in range(20):
            yield b"x" * 100_000

    response = httpx.post(f"{stack.url}/v1/runs", content=chunks(), timeout=30,
                          headers={**auth(key), "Content-Type": "application/json"})
    assert response.status_code == 413 and b"xxxx" not in response.content
    assert ApiError.model_validate_json(response.content).code == "body_too_large"


def test_every_answer_forbids_sniffing_and_framing(stack):
    _, key = stack.tenant()
    for response in (httpx.get(f"{stack.url}/healthz"),
                     httpx.get(f"{stack.url}/v1/runs/{'0' * 32}", headers=auth(key)),
                     httpx.get(f"{stack.url}/ui/login")):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_an_event_stream_closes_when_its_key_is_revoked(stack):
    _, key = stack.tenant()
    run_id = slow_run(stack, key)
    ended = threading.Event()

    def follow() -> None:
        with httpx.stream("GET", f"{stack.url}/v1/runs/{run_id}/events", headers=auth(key),
                          timeout=30) as response:
            for _ in response.iter_bytes():
                pass
        ended.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    time.sleep(0.5)
    assert not ended.is_set()  # the run goes on for 30 s: the stream stays open
    revoked = time.monotonic()
    stack.store.revoke(key)
    assert ended.wait(10), "the stream stayed open after its key was revoked"
    assert time.monotonic() - revoked < 3
    stack.backend.cancel(run_id)


def test_a_tenant_holds_at_most_its_cap_of_event_streams(stack):
    _, key = stack.tenant(TenantLimits(max_event_streams=2))
    _, other = stack.tenant(TenantLimits(max_event_streams=2))  # the same cap, its own count
    run_id = slow_run(stack, key)
    url = f"{stack.url}/v1/runs/{run_id}/events"
    with httpx.Client(timeout=30) as http:
        opened = [http.stream("GET", url, headers=auth(key)) for _ in range(2)]
        streams = [s.__enter__() for s in opened]
        assert all(s.status_code == 200 for s in streams)
        third = http.get(url, headers=auth(key))
        assert third.status_code == 429 and int(third.headers["retry-after"]) >= 1
        assert ApiError.model_validate_json(third.content).code == "stream_limit"
        # Another tenant is not held back; a stream closed gives its place back
        other_run = slow_run(stack, other, sleep=0.1)
        assert http.get(f"{stack.url}/v1/runs/{other_run}/events",
                        headers=auth(other)).status_code == 200
        opened[0].__exit__(None, None, None)
        deadline = time.monotonic() + 10
        while (again := http.get(f"{url}?follow=false", headers=auth(key))).status_code == 429:
            assert time.monotonic() < deadline, "a closed stream never gave its place back"
            time.sleep(0.1)
        assert again.status_code == 200
        opened[1].__exit__(None, None, None)
    stack.backend.cancel(run_id)


def test_a_tenants_key_gets_no_metrics(stack):
    # The test gateways have an operator token (a gateway without one answers 404: see
    # tests/metrics/test_gateway_metrics.py); a tenant's key is not it
    _, key = stack.tenant()
    response = httpx.get(f"{stack.url}/metrics", headers=auth(key))
    assert response.status_code == 401 and "genloop_" not in response.text
