"""The tools over the HTTP gateway (``Client.http`` / ``AsyncClient.http``), and over a gateway
that is down."""

from __future__ import annotations

import asyncio
import socket

import pytest
from agent_tools import CATALOG, LOOP

from genloop.integrations import GenloopTools, Progress, ToolCallError
from genloop.sdk import AsyncClient, Client, RunStatus

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, resources):
    from gateway.server import LiveServer

    from genloop.gateway import SqliteGatewayStore, create_app
    from genloop.workers.backends.embedded import EmbeddedBackend

    tmp = tmp_path_factory.mktemp("integrations-gateway")
    backend = EmbeddedBackend(tmp / "home", threads=4, resources=resources, lease_ttl=5.0)
    store = SqliteGatewayStore(tmp / "gateway.db")
    with LiveServer(create_app(backend, store)) as server:
        yield server.url, store.create_key("agent")
    backend.close()
    store.close()


@pytest.mark.slow
def test_tools_over_the_gateway_sync_and_native_async(gateway):
    url, key = gateway
    reports: list[Progress] = []

    async def sink(report: Progress) -> None:
        reports.append(report)

    with Client.http(url, api_key=key) as client:
        async def main():
            async with AsyncClient.http(url, api_key=key) as aclient:
                tools = GenloopTools(client, aclient=aclient, catalog=CATALOG)
                return tools, await tools.acall("run_loop", LOOP, progress=sink)

        tools, out = asyncio.run(main())
        again = tools.call("get_result", {"run_id": out.run_id})

    assert out.status == RunStatus.SUCCEEDED and out.images[0].png.startswith(PNG)
    assert reports and reports[-1].progress >= reports[0].progress
    assert again.run_id == out.run_id and again.images[0].png == out.images[0].png


@pytest.mark.slow
def test_an_agent_refines_a_loop_over_the_gateway_natively_async(gateway):
    url, key = gateway

    async def main():
        async with AsyncClient.http(url, api_key=key) as aclient:
            tools = GenloopTools(aclient, catalog=CATALOG)
            paused = await tools.acall("run_loop", {**LOOP, "refiner": "agent", "seed": 77})
            assert paused.refine is not None, paused.text
            answer = {"run_id": paused.run_id, "node_id": paused.refine.node_id,
                      "requests": [{"prompt": "a green triangle", "seed": 9}]}
            return await tools.acall("refine_run", answer)

    out = asyncio.run(main())

    assert out.status == RunStatus.SUCCEEDED, out.text
    assert out.rounds[1].candidates == 1 and out.images[0].png.startswith(PNG)


def test_a_gateway_that_is_down_is_a_tool_error_after_the_retries():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Client.http(f"http://127.0.0.1:{port}", attempts=2, max_backoff=0.05) as client:
        tools = GenloopTools(client, catalog=CATALOG)
        with pytest.raises(ToolCallError, match="could not be reached.*try again"):
            tools.call("run_loop", {**LOOP, "wait_seconds": 0})
