"""Whole runs through the gateway, sync and async, and POSTs retried after a lost answer."""

from __future__ import annotations

import asyncio

import httpx

from genloop.sdk import Graph, RunStatus


def chain(label: str, sleep: float = 0.0) -> Graph:
    g = Graph()
    first = g.add("gw-wait", params={"label": f"{label}-a", "sleep": sleep}, id="wait")
    g.add("gw-image", inputs=[first], params={"label": label, "n": 2}, id="image")
    return g


def test_full_run_over_http(stack):
    # Given a tenant with a key
    _, key = stack.tenant()
    client = stack.client(key)
    # When it submits a graph and waits
    run = client.submit(chain("sync"))
    result = run.wait(timeout=30)
    # Then the run succeeded with the outputs the ops made, and the images can be read
    assert result.status == RunStatus.SUCCEEDED
    images = result.items("image")
    assert [i["label"] for i in images] == ["sync", "sync"]
    assert [client.read_artifact(i["artifact"]) for i in images] == [b"sync:0", b"sync:1"]
    assert client.get(run.id).status().status == RunStatus.SUCCEEDED


def test_full_run_over_http_async(stack):
    _, key = stack.tenant()

    async def main():
        async with stack.aclient(key) as client:
            run = await client.submit(chain("async"))
            events = [e.type async for e in run.events()]
            result = await run.wait(timeout=30)
            data = await run.read_artifact(result.items("image")[1]["artifact"])
            return events, result, data

    events, result, data = asyncio.run(main())
    assert result.status == RunStatus.SUCCEEDED
    assert data == b"async:1"
    assert events[0] == "run.submitted" and events[-1] == "run.succeeded"


def test_cancel_over_http(stack):
    _, key = stack.tenant()
    run = stack.client(key).submit(chain("cancel", sleep=5.0))
    run.cancel()
    assert run.wait(timeout=10).status == RunStatus.CANCELLED


class DropFirstSubmitAnswer(httpx.HTTPTransport):
    """Lets the POST reach the server, then loses its answer, as a reset connection would."""

    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path == "/v1/runs":
            self.posts += 1
            if self.posts == 1:
                response.read()
                response.close()
                raise httpx.ReadError("connection reset after the answer was sent", request=request)
        return response


def test_post_retried_after_lost_answer_makes_one_run(stack):
    # Given a client whose first submit answer is lost after the server made the run
    tenant, key = stack.tenant()
    transport = DropFirstSubmitAnswer()
    client = stack.client(key, transport=transport)
    # When it submits (without giving an idempotency key)
    run = client.submit(chain("once"))
    # Then the POST was sent twice, yet the tenant has exactly one run: the one returned
    assert transport.posts == 2
    assert stack.store.open_runs(tenant) == [run.id]
    assert run.wait(timeout=30).status == RunStatus.SUCCEEDED


def test_same_idempotency_key_and_body_returns_the_same_run(stack):
    tenant, key = stack.tenant()
    client = stack.client(key)
    first = client.submit(chain("idem"), idempotency_key="job-1")
    again = client.submit(chain("idem"), idempotency_key="job-1")
    assert again.id == first.id
    assert stack.store.open_runs(tenant) == [first.id]
    # Another tenant using the same key gets a run of its own.
    _, other_key = stack.tenant()
    assert stack.client(other_key).submit(chain("idem"), idempotency_key="job-1").id != first.id
