"""The MCP server, in process, through the official SDK's own client."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from agent_tools import CATALOG, GENERATE, LOOP, run_count

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from genloop.integrations.mcp import build_server  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _session(tools, body):
    async def main():
        async with Client(build_server(tools)) as session:
            return await body(session)

    return asyncio.run(main())


def _pngs(result) -> list[bytes]:
    return [base64.b64decode(c.data) for c in result.content if c.type == "image"]


def test_lists_every_tool_with_genloops_schema(tools):
    async def body(session):
        return (await session.list_tools()).tools

    listed = {t.name: t for t in _session(tools, body)}

    assert list(listed) == list(tools.specs)
    loop = listed["run_loop"].input_schema
    assert loop["required"] == ["prompt"]
    assert loop["properties"]["refiner"]["enum"] == list(CATALOG.refiners)
    assert loop["properties"]["rounds"]["maximum"] == 10
    assert all(p.get("description") for p in loop["properties"].values())
    assert "get_run" in listed["run_loop"].description
    requests = listed["refine_run"].input_schema["properties"]["requests"]
    assert "$ref" not in json.dumps(requests)  # the nested model travels inlined
    assert {"prompt", "seed", "init_image", "strength"} <= set(requests["items"]["properties"])


@pytest.mark.slow
def test_a_loop_call_returns_png_image_content_and_reports_progress(tools):
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async def body(session):
        return await session.call_tool("run_loop", LOOP, progress_callback=on_progress)

    result = _session(tools, body)

    assert not result.is_error
    assert "Best score per round" in result.content[0].text
    images = _pngs(result)
    assert images and all(png.startswith(PNG) for png in images)
    assert progress and progress[-1][0] >= progress[0][0]
    assert any(message and "step" in message for _, _, message in progress)


@pytest.mark.slow
def test_resources_serve_a_runs_result_and_its_images(tools):
    async def body(session):
        started = await session.call_tool("generate_images", GENERATE)
        run_id = started.content[0].text.split()[1]
        result = await session.read_resource(f"genloop://runs/{run_id}/result")
        doc = json.loads(result.contents[0].text)
        key = doc["outputs"]["best"]["items"][0]["artifact"]
        image = await session.read_resource(f"genloop://artifacts/{key}")
        return doc, image.contents[0]

    doc, image = _session(tools, body)

    assert doc["status"] == "succeeded"
    assert image.mime_type == "image/png" and base64.b64decode(image.blob).startswith(PNG)


@pytest.mark.slow
def test_an_mcp_client_steers_a_loop_with_refine_run(tools):
    async def body(session):
        paused = await session.call_tool("run_loop", {**LOOP, "refiner": "agent"})
        run_id = paused.content[0].text.split()[1]
        answered = await session.call_tool("refine_run", {
            "run_id": run_id, "requests": [{"prompt": "a red circle", "seed": 4}]})
        return paused, answered

    paused, answered = _session(tools, body)

    assert not paused.is_error and "paused after round 1" in paused.content[0].text
    assert _pngs(paused)  # the candidates to choose from, as images
    assert not answered.is_error and "succeeded" in answered.content[0].text


def test_bad_arguments_are_an_error_result_naming_the_field(tools, client):
    async def body(session):
        return await session.call_tool("run_loop", {**LOOP, "model": "sdxl", "rounds": 99})

    result = _session(tools, body)

    assert result.is_error
    text = result.content[0].text
    assert "- model: Input should be 'tiny'" in text and "- rounds:" in text
    assert run_count(client) == 0


# The stdio round trip, with `genloop mcp` as a subprocess, is the MCP example's test
# (tests/integrations/test_tools_examples.py).


def test_streamable_http_transport_lists_tools_and_answers_calls(tools):
    import socket
    import threading
    import time

    import uvicorn

    app = build_server(tools).streamable_http_app()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the MCP HTTP server did not start"
        time.sleep(0.01)

    async def main():
        async with Client(f"http://127.0.0.1:{port}/mcp") as session:
            names = [t.name for t in (await session.list_tools()).tools]
            return names, await session.call_tool("get_result", {"run_id": "missing"})

    try:
        names, missing = asyncio.run(main())
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    assert names == list(tools.specs)
    assert missing.is_error and "Check the run_id" in missing.content[0].text
