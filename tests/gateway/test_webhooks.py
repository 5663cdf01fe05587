"""Signed webhooks through the live gateway: a real receiver on loopback gets one delivery a run
that verifies, retries until it answers 2xx, 410 stops, replays keep the webhook-id, and no
address the operator did not allow is ever called."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from server import console_sign_in
from webhook_receiver import Receiver

from genloop.gateway import SqliteGatewayStore
from genloop.gateway.store import WebhookJob
from genloop.gateway.webhook_addresses import AddressPolicy
from genloop.gateway.webhooks import WebhookDeliverer
from genloop.sdk import Graph, GraphError, Loop
from genloop.sdk.webhooks import WebhookVerificationError, new_secret, verify


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def with_secret(stack) -> tuple[str, str]:
    """A fresh tenant's key and its new webhook secret."""
    _, key = stack.tenant()
    response = httpx.post(f"{stack.url}/v1/webhooks/secret",
                          headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 201, response.text
    return key, response.json()["secret"]


def quick(url: str, label: str = "w") -> Graph:
    g = Graph(labels={"job": label}, webhook={"url": url})
    g.add("gw-image", params={"label": label, "n": 2}, id="image")
    return g


def test_each_run_gets_one_signed_delivery_that_verifies(stack, receiver):
    key, secret = with_secret(stack)
    client = stack.client(key)
    runs = [client.submit(quick(receiver.url, f"one-{i}")) for i in range(3)]
    ended = {run.id: run.wait(timeout=60).finished_at for run in runs}

    deliveries = receiver.wait_for(3)
    time.sleep(0.5)  # nothing more comes
    assert len(receiver.deliveries) == 3
    bodies = {}
    for headers, body, received in deliveries:
        verify(headers, body, secret)
        summary = json.loads(body)
        assert headers["webhook-id"] == f"msg_{summary['run_id']}"
        assert summary["status"] == "succeeded" and summary["labels"]["job"].startswith("one-")
        assert set(summary["compute"]) == {"steps", "images", "wall_s", "judge"}
        assert len(body) < 2_000
        assert received - ended[summary["run_id"]] < 5
        bodies[summary["run_id"]] = body
    assert set(bodies) == set(ended)
    with pytest.raises(WebhookVerificationError):
        verify(deliveries[0][0], deliveries[0][1], "whsec_" + "A" * 32)
    # The job says it was delivered, and the attempt is an event of the run
    job = httpx.get(f"{stack.url}/v1/webhooks/{runs[0].id}",
                    headers={"Authorization": f"Bearer {key}"}).json()
    assert job["state"] == "delivered" and job["attempts"] == 1 and job["last_status"] == 200
    attempts = [e for e in stack.backend.events(runs[0].id, 0, 1000)
                if e.type == "webhook.attempt"]
    assert [(e.attempt, e.status) for e in attempts] == [(1, "200")]
    # and the console's run page shows the delivery and its attempt
    with httpx.Client(base_url=stack.url, follow_redirects=True) as http:
        console_sign_in(http, key)
        page = http.get(f"/ui/runs/{runs[0].id}").text
    assert "<strong>delivered</strong>" in page and "attempt 1: 200" in page


def test_a_failing_receiver_gets_it_on_the_fourth_attempt_and_410_stops(stack):
    key, secret = with_secret(stack)
    flaky, gone = Receiver([500, 503, 502]), Receiver([410])
    try:
        client = stack.client(key)
        first = client.submit(quick(flaky.url, "flaky"))
        second = client.submit(quick(gone.url, "gone"))
        deliveries = flaky.wait_for(4)
        assert len({h["webhook-id"] for h, _, _ in deliveries}) == 1  # one delivery, retried
        for headers, body, _ in deliveries:
            verify(headers, body, secret)
        gone.wait_for(1)
        time.sleep(1.0)  # backoff is 0.05 s here: a retry would have come
        assert len(gone.deliveries) == 1 and len(flaky.deliveries) == 4
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{stack.url}/v1/webhooks/{first.id}", headers=auth).json()[
            "attempts"] == 4
        assert httpx.get(f"{stack.url}/v1/webhooks/msg_{second.id}", headers=auth).json()[
            "state"] == "stopped"
        # A replay sends it again with the same webhook-id
        replayed = httpx.post(f"{stack.url}/v1/webhooks/{second.id}/replay", headers=auth)
        assert replayed.status_code == 200 and replayed.json()["state"] == "pending"
        again = gone.wait_for(2)
        assert again[1][0]["webhook-id"] == again[0][0]["webhook-id"] == f"msg_{second.id}"
    finally:
        flaky.close()
        gone.close()


def test_webhooks_refused_at_submit_name_the_reason_and_start_nothing(stack):
    _, no_secret = stack.tenant()
    body = quick("https://example.com/hook").model_dump_json()
    post = httpx.post(f"{stack.url}/v1/runs", content=body, headers={
        "Authorization": f"Bearer {no_secret}", "Content-Type": "application/json"})
    assert post.status_code == 422
    [problem] = post.json()["details"]["problems"]
    # the refusal says how to make a secret, and why one is needed
    assert (problem["path"], problem["message"]) == ("webhook.url", (
        "make a webhook secret first (POST /v1/webhooks/secret): deliveries are signed with it"))
    key, _ = with_secret(stack)
    client = stack.client(key)
    # each refusal names its own reason, at the webhook's URL
    for url, reason in (("http://10.0.0.7/hook", "10.0.0.7"),
                        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
                        ("http://[::1]:8080/x", "::1"), ("http://127.0.0.2:1/x", "127.0.0.2"),
                        ("ftp://example.com/x", "https?://"),  # refused by the SDK
                        ("http://user:pw@example.com/x", "no user or password")):
        with pytest.raises((GraphError, ValueError)) as caught:
            client.submit(Loop(prompt="p", model="tiny", rounds=1, candidates=1,
                               webhook={"url": url}))
        assert "webhook" in str(caught.value) and reason in str(caught.value), url
    assert list(client.runs()) == []
    # Another tenant's run has no webhook to see or replay
    other, _ = with_secret(stack)
    run = stack.client(other).submit(quick("http://127.0.0.1:9/x", "theirs"))
    for method, path in (("GET", f"/v1/webhooks/{run.id}"),
                         ("POST", f"/v1/webhooks/{run.id}/replay")):
        response = httpx.request(method, f"{stack.url}{path}",
                                 headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 404


def test_no_webhook_is_shown_for_a_run_without_one_or_a_notice_never_made(stack):
    # Given a tenant's own run that asked for no webhook
    _, key = stack.tenant()
    plain = Graph()
    plain.add("gw-image", params={"label": "plain", "n": 1}, id="image")
    run = stack.client(key).submit(plain)
    # When the tenant asks for its webhook, or for a notice's id that no notice has
    # Then each is a 404 naming what was asked for, not an empty answer or a server error
    for asked in (run.id, f"msg_{run.id}", "msg_n" + "0" * 32):
        response = httpx.get(f"{stack.url}/v1/webhooks/{asked}",
                             headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 404 and asked in response.json()["message"], response.text


def test_a_name_that_resolves_to_a_private_address_at_delivery_is_not_called(stack, receiver,
                                                                               tmp_path):
    # DNS rebinding: public when submitted, loopback (the receiver) when delivered
    key, secret = with_secret(stack)
    plain = Graph()  # no webhook of its own: only the deliverers below send
    plain.add("gw-image", params={"label": "rebind", "n": 1}, id="image")
    run = stack.client(key).submit(plain)
    run.wait(timeout=60)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    store.set_webhook_secret("t", secret)
    port = int(receiver.url.split(":")[2].split("/")[0])
    job = WebhookJob(run_id=run.id, tenant="t", url=f"http://hooks.example:{port}/hook",
                     webhook_id="msg_rebind", next_at=0.0)
    store.put_webhook(job)
    resolved = {"hooks.example": "127.0.0.1"}
    rebinding = AddressPolicy(resolve=lambda host, _port: [resolved[host]])
    before = len(receiver.deliveries)

    assert WebhookDeliverer(store, stack.backend, rebinding, backoff=60).step() == 1

    assert len(receiver.deliveries) == before  # never called
    refused = store.webhook("msg_rebind")
    assert refused.state == "pending" and refused.attempts == 1 and refused.last_status is None
    # With the operator's allow-list the same address is called, at the address checked
    allowed = AddressPolicy.of(["127.0.0.1/32"], resolve=lambda host, _port: [resolved[host]])
    store.put_webhook(refused.model_copy(update={"next_at": 0.0}))
    assert WebhookDeliverer(store, stack.backend, allowed, backoff=60).step() == 1
    headers, body, _ = receiver.wait_for(before + 1)[-1]
    assert headers["Host"] == f"hooks.example:{port}"
    verify(headers, body, secret)
    store.close()


class ListingBehindASender(SqliteGatewayStore):
    """Once armed, answers a listing of due jobs only after the jobs it lists were delivered:
    a step whose read of the due jobs raced a sender that was making one of them."""

    armed = False

    def due_webhooks(self, now: float, limit: int = 100) -> list[WebhookJob]:
        jobs = super().due_webhooks(now, limit)
        deadline = time.monotonic() + 10
        while self.armed and any(self.webhook(j.webhook_id).state == "pending" for j in jobs):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1 if self.armed else 0)  # the sender lets go of the job
        return jobs


def test_a_job_listed_while_its_sender_made_it_is_not_sent_again(tmp_path):
    receiver = Receiver(delay=0.5)
    store = ListingBehindASender(tmp_path / "gateway.db")
    try:
        store.set_webhook_secret("t", new_secret())
        store.put_webhook(WebhookJob(webhook_id="msg_nonce", run_id="", tenant="t",
                                     url=receiver.url, kind="batch.ended",
                                     payload={"type": "batch.ended"}, next_at=0.0))
        loopback = AddressPolicy.of(["127.0.0.1/32"])
        deliverer = WebhookDeliverer(store, None, loopback)  # type: ignore[arg-type]  # no run
        assert deliverer.step(wait=False) == 1  # a sender takes it; the receiver is slow
        store.armed = True
        # The step lists it while it is being sent, and looks again once it was; it returns
        # when every sender it started is done, and a receiver records a delivery on arrival,
        # so a duplicate would be here by then
        deliverer.step()
        assert len(receiver.deliveries) == 1
        assert store.webhook("msg_nonce").attempts == 1
    finally:
        receiver.close()
        store.close()


def test_a_loop_reports_its_pause_and_rounds_when_asked(stack, receiver):
    key, secret = with_secret(stack)
    loop = Loop(prompt="a red circle", model="tiny", rounds=2, candidates=2, steps=1,
                refiner="agent", refine_timeout=1, labels={"agent": "a1"},
                webhook={"url": receiver.url,
                         "events": ["run.ended", "refine.requested", "round.finished"]})
    run = stack.client(key).submit(loop)
    assert run.wait(timeout=120).status == "succeeded"  # the pause fell back after 1 s

    deliveries = receiver.wait_for(4)
    time.sleep(0.5)
    kinds = {}
    for headers, body, _ in receiver.deliveries:
        verify(headers, body, secret)
        message = json.loads(body)
        assert message["run_id"] == run.id
        kinds.setdefault(message["type"], []).append((headers["webhook-id"], message))
    assert sorted(kinds) == ["refine.requested", "round.finished", "run.ended"]
    assert sorted(m["round"] for _, m in kinds["round.finished"]) == [1, 2]
    assert all(isinstance(m["best_score"], float) for _, m in kinds["round.finished"])
    (pause_id, pause), = kinds["refine.requested"]
    assert pause["round"] == 1 and len(pause["scored"]) == 2 and pause["labels"] == {"agent": "a1"}
    assert pause_id.startswith(f"msg_{run.id}_") and kinds["run.ended"][0][0] == f"msg_{run.id}"
    assert len({h["webhook-id"] for h, _, _ in deliveries}) == len(receiver.deliveries) == 4
    # Each delivery is one job of the run's, found by its webhook-id
    job = httpx.get(f"{stack.url}/v1/webhooks/{pause_id}",
                    headers={"Authorization": f"Bearer {key}"}).json()
    assert job["kind"] == "refine.requested" and job["state"] == "delivered"
    with pytest.raises(ValueError):
        Loop(prompt="p", webhook={"url": receiver.url, "events": ["refine.requested"]})


def test_delivery_attempts_are_the_tenants_and_stop_at_its_quota_until_the_next_minute(stack):
    from genloop.gateway import TenantLimits

    if time.time() % 60 > 50:  # the quota is per minute: start well inside one
        time.sleep(61 - time.time() % 60)
    failing = Receiver([500] * 100)
    try:
        tenant, key = stack.tenant(TenantLimits(webhook_attempts_per_minute=2))
        stack.store.set_webhook_secret(tenant, "whsec_" + "A" * 32)
        run = stack.client(key).submit(quick(failing.url, "quota"))
        failing.wait_for(2)
        time.sleep(1.0)  # backoff is 0.05 s here: without the quota ~5 more would have come
        assert len(failing.deliveries) == 2
        job = httpx.get(f"{stack.url}/v1/webhooks/{run.id}",
                        headers={"Authorization": f"Bearer {key}"}).json()
        # The waiting delivery is due at the next minute, not counted as an attempt
        assert job["state"] == "pending" and job["attempts"] == 2
        assert job["next_at"] >= (time.time() // 60 + 1) * 60 - 1
    finally:
        failing.close()


def test_agent_tools_put_the_hosts_webhook_on_the_runs_they_start(stack, receiver):
    from genloop.integrations.catalog import Catalog
    from genloop.integrations.tools import GenloopTools

    key, secret = with_secret(stack)
    tools = GenloopTools(stack.client(key), catalog=Catalog(models=("tiny",)),
                         webhook=receiver.url)
    out = tools.call("run_loop", {"prompt": "a red circle", "rounds": 1, "candidates": 1,
                                  "steps": 1, "label": "task-9", "wait_seconds": 120})
    assert out.done

    (headers, body, _), = receiver.wait_for(1)
    verify(headers, body, secret)
    ended = json.loads(body)
    assert ended["run_id"] == out.run_id and ended["labels"] == {"tool.label": "task-9"}
