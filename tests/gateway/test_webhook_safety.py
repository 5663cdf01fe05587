"""What leaves the gateway for a webhook, and only that: redirects are not followed, a slow
receiver is cut off at the timeout, an answer is kept only as an excerpt, the operator's
deny-list wins over its allow-list and over public addresses, and a rotated secret signs every
delivery from then on."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from test_webhooks import quick, with_secret
from webhook_receiver import Receiver

from genloop.gateway import SqliteGatewayStore
from genloop.gateway.store import WebhookJob
from genloop.gateway.webhook_addresses import AddressPolicy, WebhookRefused
from genloop.gateway.webhooks import EXCERPT, WebhookDeliverer
from genloop.sdk import Graph
from genloop.sdk.webhooks import WebhookVerificationError, verify

LOOPBACK = AddressPolicy.of(["127.0.0.1/32"])


class Answering:
    """A receiver that answers every POST with ``status``, ``headers`` and ``body`` after
    ``delay`` seconds."""

    def __init__(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"",
                 delay: float = 0.0) -> None:
        self.calls = 0
        answering = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answering.calls += 1
                time.sleep(delay)
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ended_run(stack):
    """A run of the stack's that has ended, and its tenant's store with a secret."""
    _, key = stack.tenant()
    g = Graph()
    g.add("gw-image", params={"label": "safety", "n": 1}, id="image")
    run = stack.client(key).submit(g)
    run.wait(timeout=60)
    return run.id


def deliver(stack, store, run_id: str, url: str, **options) -> WebhookJob:
    store.put_webhook(WebhookJob(run_id=run_id, tenant="t", url=url,
                                 webhook_id=f"msg_{run_id}", next_at=0.0))
    deliverer = WebhookDeliverer(store, stack.backend, LOOPBACK, backoff=60, **options)
    assert deliverer.step() == 1
    return store.webhook(f"msg_{run_id}")


@pytest.fixture
def store(tmp_path):
    s = SqliteGatewayStore(tmp_path / "gateway.db")
    s.set_webhook_secret("t", "whsec_" + "A" * 32)
    yield s
    s.close()


def attempts(stack, run_id: str) -> list[dict]:
    return [json.loads(e.message) for e in stack.backend.events(run_id, 0, 1000)
            if e.type == "webhook.attempt"]


def test_a_redirect_is_an_answer_not_followed(stack, store, ended_run):
    elsewhere = Receiver()
    moved = Answering(307, {"Location": elsewhere.url})
    try:
        job = deliver(stack, store, ended_run, moved.url)
        time.sleep(0.3)
        assert moved.calls == 1 and elsewhere.deliveries == []
        assert job.state == "pending" and job.last_status == 307 and job.attempts == 1
    finally:
        moved.close()
        elsewhere.close()


def test_a_slow_receiver_is_cut_off_and_a_long_answer_kept_as_an_excerpt(stack, store,
                                                                         ended_run):
    slow = Answering(200, delay=3.0)
    chatty = Answering(500, body=b"x" * 100_000)
    try:
        start = time.monotonic()
        job = deliver(stack, store, ended_run, slow.url, timeout=0.5)
        assert time.monotonic() - start < 2.5
        assert job.state == "pending" and job.last_status is None
        assert "Timeout" in attempts(stack, ended_run)[-1]["answer"]

        store.put_webhook(job.model_copy(update={"url": chatty.url, "next_at": 0.0}))
        assert WebhookDeliverer(store, stack.backend, LOOPBACK, backoff=60).step() == 1
        answer = attempts(stack, ended_run)[-1]["answer"]
        assert answer == "x" * EXCERPT
        assert store.webhook(f"msg_{ended_run}").last_status == 500
    finally:
        slow.close()
        chatty.close()


def test_the_operators_deny_list_wins():
    public = {"hooks.example": "93.184.216.34", "inside.example": "10.1.2.3"}

    def resolve(host: str, _port: int) -> list[str]:
        return [public.get(host, host)]  # an address stands for itself

    AddressPolicy(resolve=resolve).check("https://hooks.example/h")  # public: called
    for allow, deny, url in (([], ["93.184.216.0/24"], "https://hooks.example/h"),
                             (["10.0.0.0/8"], ["10.1.0.0/16"], "http://inside.example/h"),
                             (["127.0.0.0/8"], ["127.0.0.1/32"], "http://127.0.0.1:9/h")):
        policy = AddressPolicy.of(allow, deny, resolve=resolve)
        with pytest.raises(WebhookRefused, match="denies"):
            policy.check(url)
    with pytest.raises(WebhookRefused, match="not a host name"):  # was a 500 (idna's error)
        AddressPolicy().check("https://\x8ecGq\r")
    assert AddressPolicy.of(["10.0.0.0/8"], resolve=resolve).check(
        "http://inside.example/h").address == "10.1.2.3"


def test_a_rotated_secret_signs_every_delivery_after_it(stack):
    key, first = with_secret(stack)
    again = httpx.post(f"{stack.url}/v1/webhooks/secret",
                       headers={"Authorization": f"Bearer {key}"})
    assert again.status_code == 201
    second = again.json()["secret"]
    assert second != first and second.startswith("whsec_")
    receiver = Receiver()
    try:
        stack.client(key).submit(quick(receiver.url, "rotated"))
        (headers, body, _), = receiver.wait_for(1)
        verify(headers, body, second)
        with pytest.raises(WebhookVerificationError):
            verify(headers, body, first)
    finally:
        receiver.close()
