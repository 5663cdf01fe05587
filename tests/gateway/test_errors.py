"""Every refusal in the one error shape: 401, 404, 409, 413, 422, 429, and the SDK's view."""

from __future__ import annotations

import time

import httpx
import pytest

from genloop.gateway import TenantLimits
from genloop.sdk import ClientError, Graph, GraphError, IdempotencyConflict, Loop, NotFound
from genloop.sdk.wire import ApiError


def wait_graph(label: str, sleep: float = 0.0) -> Graph:
    g = Graph()
    g.add("gw-wait", params={"label": label, "sleep": sleep}, id="wait")
    return g


def post(stack, key: str | None, body: bytes | str, **headers: str) -> httpx.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    headers.setdefault("Content-Type", "application/json")
    return httpx.post(f"{stack.url}/v1/runs", content=body, headers=headers, timeout=10)


def error(response: httpx.Response, status: int, code: str) -> ApiError:
    assert response.status_code == status, response.text
    body = ApiError.model_validate_json(response.content)
    assert body.code == code
    assert body.message
    return body


def test_401_without_or_with_an_unknown_key(stack):
    body = wait_graph("x").model_dump_json()
    response = post(stack, None, body)
    error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    error(post(stack, "gl_not-a-key", body), 401, "unauthorized")
    error(httpx.get(f"{stack.url}/v1/runs/abc"), 401, "unauthorized")


def test_404_for_unknown_runs_and_routes(stack):
    _, key = stack.tenant()
    auth = {"Authorization": f"Bearer {key}"}
    error(httpx.get(f"{stack.url}/v1/runs/{'f' * 32}", headers=auth), 404, "not_found")
    error(httpx.get(f"{stack.url}/v1/artifacts/{'a' * 64}.png", headers=auth), 404, "not_found")
    error(httpx.get(f"{stack.url}/v2/nothing", headers=auth), 404, "not_found")
    with pytest.raises(NotFound):
        stack.client(key).get("f" * 32)


def test_409_for_a_reused_idempotency_key_with_another_body(stack):
    _, key = stack.tenant()
    first = post(stack, key, wait_graph("one").model_dump_json(), **{"Idempotency-Key": "k"})
    assert first.status_code == 201
    replay = post(stack, key, wait_graph("one").model_dump_json(), **{"Idempotency-Key": "k"})
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    conflict = error(post(stack, key, wait_graph("two").model_dump_json(),
                          **{"Idempotency-Key": "k"}), 409, "idempotency_conflict")
    assert conflict.message.startswith(
        f"idempotency key already used by run {first.json()['id']} with another spec")
    with pytest.raises(IdempotencyConflict) as caught:
        stack.client(key).submit(wait_graph("three"), idempotency_key="k")
    assert caught.value.status_code == 409 and caught.value.run_id == first.json()["id"]


def test_413_for_a_body_over_the_cap(stack):
    _, key = stack.tenant()
    from gateway_settings import MAX_BODY

    big = Graph()
    big.add("gw-wait", params={"label": "x" * (MAX_BODY + 10)}, id="wait")
    body = error(post(stack, key, big.model_dump_json()), 413, "body_too_large")
    assert body.details["max_bytes"] == MAX_BODY
    # A chunked body (no Content-Length) is cut off as it arrives.
    chunks = (b"x" * 10_000 for _ in range(MAX_BODY // 10_000 + 2))
    error(post(stack, key, chunks), 413, "body_too_large")  # type: ignore[arg-type]


def test_422_lists_every_graph_problem_with_node_ids(stack):
    _, key = stack.tenant()
    g = Graph()
    g.add("no-such-op", id="ghost")
    g.add("gw-wait", inputs=["missing"], params={"label": "x"}, id="orphan")
    body = error(post(stack, key, g.model_dump_json()), 422, "invalid_graph")
    assert body.details["node_ids"] == ["ghost", "orphan"]
    assert {p["node_id"] for p in body.details["problems"]} == {"ghost", "orphan"}
    with pytest.raises(GraphError) as caught:
        stack.client(key).submit(g)
    assert {p.node_id for p in caught.value.problems} == {"ghost", "orphan"}
    # A body that is not a Graph or Loop at all is refused the same way.
    body = error(post(stack, key, '{"kind": "dag"}'), 422, "invalid_request")
    assert body.details["problems"]
    error(post(stack, key, "{not json"), 422, "invalid_request")


def test_429_when_a_tenant_has_too_many_runs_and_the_sdk_waits_for_retry_after(stack):
    # Given a tenant allowed one unfinished run, with one running for about a second
    _, key = stack.tenant(TenantLimits(max_concurrent_runs=1, max_candidates_per_run=4))
    client = stack.client(key)
    running = client.submit(wait_graph("first", sleep=1.0))
    # When it submits another through raw HTTP: 429, Retry-After, the limit in the body
    response = post(stack, key, wait_graph("second").model_dump_json())
    body = error(response, 429, "concurrency_limit")
    assert response.headers["retry-after"] == "1"
    assert body.details["limit"] == 1
    # Then the SDK, retrying after Retry-After, gets in once the first run has ended
    client = stack.client(key, max_backoff=2.0, attempts=8)
    start = time.monotonic()
    second = client.submit(wait_graph("second"))
    assert time.monotonic() - start >= 0.5
    assert running.status().status.terminal
    assert second.wait(timeout=10).status == "succeeded"


def test_429_for_too_many_candidates_is_not_retried(stack):
    _, key = stack.tenant(TenantLimits(max_concurrent_runs=5, max_candidates_per_run=4))
    loop = Loop(prompt="a red sneaker", candidates=3, rounds=2)
    response = post(stack, key, loop.model_dump_json())
    body = error(response, 429, "candidate_limit")
    assert body.details == {"limit": 4, "requested": 6}
    start = time.monotonic()
    with pytest.raises(ClientError) as caught:
        stack.client(key).submit(loop)
    assert caught.value.code == "candidate_limit"
    assert time.monotonic() - start < 0.5  # refused once, not retried
