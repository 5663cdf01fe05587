"""Whole runs through the gateway, sync and async, POSTs retried after a lost answer, and
resume."""

from __future__ import annotations

import asyncio

import httpx

from genloop.gateway import TenantLimits
from genloop.sdk import Graph, NodeStatus, RunStatus


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


def failing(label: str, log: str) -> Graph:
    """An image made beside a node that fails for good (and one skipped after it): the run
    fails with an artifact of its own."""
    g = Graph()
    g.add("gw-image", params={"label": label}, id="made")
    doomed = g.add("test-count", params={"log": log, "fail_times": 1, "permanent": True},
                   id="doomed")
    g.add("gw-image", inputs=[doomed], params={"label": f"{label}-after"}, id="after")
    return g


def test_resume_leaves_the_concurrency_count_and_artifacts_to_the_back_end(stack, tmp_path):
    # The gateway store changes nothing on resume (Gateway.resume says why): it relies on a
    # resumed run being one that never ended. If resume ever revives an ended run, this fails
    # and the store must re-open the run (counted, unindexed) under the tenant's lock.
    tenant, key = stack.tenant(TenantLimits(max_concurrent_runs=1))
    client = stack.client(key)
    auth = {"Authorization": f"Bearer {key}"}
    failed = client.submit(failing("resumed", str(tmp_path / "log")))
    result = failed.wait(timeout=30)
    assert result.status == RunStatus.FAILED
    (made,) = result.items("made")

    # When the failed run is resumed: it stays failed, nothing more runs, nothing is counted
    answer = httpx.post(f"{stack.url}/v1/runs/{failed.id}/resume", headers=auth, timeout=10)
    assert answer.status_code == 200 and answer.json()["status"] == "failed"
    assert client.get(failed.id).result().outputs["after"].status == NodeStatus.SKIPPED
    assert client.read_artifact(made["artifact"]) == b"resumed:0"
    _, other = stack.tenant()
    assert httpx.get(f"{stack.url}/v1/artifacts/{made['artifact']}", timeout=10,
                     headers={"Authorization": f"Bearer {other}"}).status_code == 404

    # And a running run resumed is still counted once: the tenant's one slot stays taken
    running = client.submit(chain("running", sleep=5.0))
    answer = httpx.post(f"{stack.url}/v1/runs/{running.id}/resume", headers=auth, timeout=10)
    assert answer.status_code == 200 and not RunStatus(answer.json()["status"]).terminal
    assert stack.store.open_runs(tenant) == [running.id]
    refused = httpx.post(f"{stack.url}/v1/runs", content=chain("third").model_dump_json(),
                         headers={**auth, "Content-Type": "application/json"}, timeout=10)
    assert refused.status_code == 429 and refused.json()["code"] == "concurrency_limit"
    running.cancel()
