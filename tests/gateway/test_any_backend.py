"""A gateway serves any back end (``create_app``'s promise), not only one over a scheduler: here
one in front of another gateway, over HTTP. It sends each submit on with the tenant's own
idempotency key, so a retried POST is answered with the run it made, and another body under
the key is refused with that run's id."""

from __future__ import annotations

import pytest
from server import LiveServer
from test_errors import wait_graph

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app
from genloop.sdk import Client, IdempotencyConflict
from genloop.sdk.http import HttpBackend, HttpConfig


@pytest.mark.parametrize("stack", ["embedded"], indirect=True)
def test_a_gateway_in_front_of_another_replays_a_keyed_submit_and_refuses_another_body(
        stack, tmp_path):
    # Given a gateway whose back end is another gateway, reached with one of its tenants' keys
    _, upstream_key = stack.tenant()
    upstream = HttpBackend(HttpConfig(stack.url, api_key=upstream_key, max_backoff=0.2))
    store = SqliteGatewayStore(tmp_path / "front.db")
    with LiveServer(create_app(upstream, store, GatewaySettings())) as front:
        client = Client.http(front.url, api_key=store.create_key("acme"), max_backoff=0.2)
        try:
            # When a keyed submit is sent twice, Then the second is answered with the first run
            first = client.submit(wait_graph("one"), idempotency_key="job-1")
            assert client.submit(wait_graph("one"), idempotency_key="job-1").id == first.id
            assert first.wait(timeout=30).status == "succeeded"
            # And another body under the key is refused, naming the run the key made
            with pytest.raises(IdempotencyConflict) as caught:
                client.submit(wait_graph("two"), idempotency_key="job-1")
            assert caught.value.run_id == first.id
        finally:
            client.close()
            store.close()
            upstream.close()
