"""Schemathesis against the live ``/openapi.json``: generated requests never get a 5xx."""

from __future__ import annotations

import httpx
import schemathesis
from gateway_settings import MAX_BODY
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from server import LiveServer

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app
from genloop.workers import OpRegistry, default_registry
from genloop.workers.backends.embedded import EmbeddedBackend

#: Generated requests per operation; bounded so the suite stays quick.
EXAMPLES = 25


def test_no_server_error_for_any_generated_request(tmp_path):
    # Given a gateway whose back end knows only the cheap test ops: a generated spec that
    # happens to be valid must not start real image generation on this machine.
    registry = OpRegistry()
    for name in ("gw-wait", "gw-image"):
        registry.register(default_registry[name])
    backend = EmbeddedBackend(tmp_path / "home", threads=2, registry=registry)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    headers = {"Authorization": f"Bearer {store.create_key('fuzz')}"}
    app = create_app(backend, store, GatewaySettings(max_body_bytes=MAX_BODY))
    try:
        with LiveServer(app) as server:
            # The first /v1/schema builds the schema once per process: here, not inside a
            # generated request's 10 s timeout on a loaded machine.
            httpx.get(f"{server.url}/v1/schema", headers=headers, timeout=120)
            schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
            operations = [result.ok() for result in schema.get_all_operations()]
            assert len(operations) >= 9
            for operation in operations:
                # When schemathesis sends each operation its generated requests
                @given(case=operation.as_strategy())
                @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck), database=None)
                def no_5xx(case):
                    # follow=false: a generated stream must not wait on a run that never ends.
                    if case.path.endswith("/events"):
                        case.query = {**(case.query or {}), "follow": "false"}
                    response = case.call(base_url=server.url, headers=headers, timeout=10)
                    # Then none is answered with a server error
                    case.validate_response(response, checks=[not_a_server_error])

                no_5xx()
    finally:
        backend.close()
        store.close()
