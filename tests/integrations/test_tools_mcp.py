"""The MCP server through the official SDK's own client: in process, and over streamable HTTP
(``/mcp``). The stdio round trip, with ``genloop mcp`` as a subprocess, is in
test_tools_mcp_stdio.py."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time

import pytest
from agent_tools import (
    CATALOG,
    GENERATE,
    LOOP,
    ProgressLog,
    assert_labelled_loop_result,
    run_count,
    shipped_served_catalog,
)

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from genloop.integrations import ToolResult  # noqa: E402
from genloop.integrations.mcp import build_server  # noqa: E402
from genloop.integrations.result import output_schema  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _session(tools, body):
    async def main():
        async with Client(build_server(tools)) as session:
            return await body(session)

    return asyncio.run(main())


def _labels(result) -> list[str]:
    """The text block before each image: what the image is."""
    blocks = result.content
    return [blocks[i - 1].text for i, c in enumerate(blocks) if c.type == "image"]


def test_lists_every_tool_with_genloops_lean_schema_and_an_output_schema(tools):
    async def body(session):
        return (await session.list_tools()).tools

    listed = {t.name: t for t in _session(tools, body)}

    assert list(listed) == list(tools.specs)
    loop = listed["run_loop"].input_schema
    assert loop["required"] == ["prompt"] and loop["additionalProperties"] is False
    assert loop["properties"]["refiner"]["enum"] == list(CATALOG.refiners)
    assert loop["properties"]["rounds"]["maximum"] == 10
    assert "one of" not in json.dumps(loop)  # the enums are not repeated in prose
    assert all('"title"' not in json.dumps(t.input_schema) for t in listed.values())
    assert all(t.output_schema == output_schema() for t in listed.values())
    requests = listed["refine_run"].input_schema["properties"]["requests"]
    assert "$ref" not in json.dumps(requests)  # the nested model travels inlined
    assert {"prompt", "seed", "init_image", "strength"} <= set(requests["items"]["properties"])


@pytest.mark.slow
def test_a_loop_call_returns_structured_content_labelled_images_and_progress(tools):
    progress = ProgressLog()

    async def body(session):
        await session.list_tools()  # the client validates structuredContent against it
        return await session.call_tool("run_loop", {**LOOP, "candidates": 3},
                                       progress_callback=progress)

    result = _session(tools, body)

    found = assert_labelled_loop_result(result)
    assert [r.round for r in found.rounds] == [1, 2]
    assert found.best.score == max(r.best_score for r in found.rounds)
    assert all(im.artifact in result.content[0].text for im in found.images)
    progress.assert_one_per_event()  # round 2 runs three candidate jobs: each line once
    assert progress.seen[0][2] == f"run {found.run_id} submitted"
    assert any("round-2/generate: step" in m for _, _, m in progress.seen)


@pytest.mark.slow
def test_resources_serve_a_compact_result_unless_embeddings_are_asked(tools):
    async def body(session):
        started = await session.call_tool("generate_images", GENERATE)
        uri = f"genloop://runs/{started.structured_content['run_id']}/result"
        compact = await session.read_resource(uri)
        full = await session.read_resource(uri + "?embeddings=true")
        image = await session.read_resource(
            f"genloop://artifacts/{started.structured_content['best']['artifact']}")
        return compact.contents[0].text, full.contents[0].text, image.contents[0]

    compact, full, image = _session(tools, body)

    doc = json.loads(compact)
    assert doc["status"] == "succeeded" and doc["outputs"]["score"]["items"]
    assert '"embedding"' not in compact
    assert all(item["embedding"] for item in json.loads(full)["outputs"]["score"]["items"])
    assert len(compact) < len(full) / 2
    assert image.mime_type == "image/png" and base64.b64decode(image.blob).startswith(PNG)


def test_unknown_resources_are_readable_errors(tools):
    from mcp.shared.exceptions import MCPError

    async def body(session):
        errors = []
        for uri in ("genloop://artifacts/nosuchkey", f"genloop://artifacts/{'ab' * 32}.png",
                    "genloop://runs/nosuchrun/result"):
            with pytest.raises(MCPError) as caught:
                await session.read_resource(uri)
            errors.append(str(caught.value))
        return errors

    malformed, missing, run = _session(tools, body)

    assert "malformed artifact key" in malformed and "Use an artifact key" in malformed
    assert "no artifact" in missing
    assert "nosuchrun" in run and "Use a run_id" in run
    assert not any("Error creating resource" in e for e in (malformed, missing, run))


@pytest.mark.slow
def test_a_paused_loop_is_recognisable_from_structured_content_and_refine_run_answers(tools):
    async def body(session):
        await session.list_tools()
        paused = await session.call_tool("run_loop", {**LOOP, "refiner": "agent"})
        pause = paused.structured_content["refine"]
        answered = await session.call_tool("refine_run", {
            "run_id": paused.structured_content["run_id"], "node_id": pause["node_id"],
            "requests": [{"prompt": "a red circle", "seed": 4,
                          "init_image": pause["scored"][0]["artifact"], "strength": 0.5}]})
        return paused, answered

    paused, answered = _session(tools, body)

    pause = ToolResult.model_validate(paused.structured_content)
    assert not pause.done and pause.status == "running"
    assert pause.refine.node_id == "round-1/refine" and pause.refine.round == 1
    assert [c.score for c in pause.refine.scored] == sorted(
        (c.score for c in pause.refine.scored), reverse=True)
    assert _labels(paused)[0] == f"best: {pause.refine.scored[0].artifact}"
    end = ToolResult.model_validate(answered.structured_content)
    assert end.done and end.status == "succeeded" and end.refine is None


@pytest.mark.parametrize(("arguments", "expected"), [
    ({k: v for k, v in LOOP.items() if k != "prompt"}, "- prompt: Field required"),
    ({**LOOP, "candidate": 3}, "- candidate: Extra inputs are not permitted"),
    ({**LOOP, "model": "sdxl", "rounds": 99}, "- model: Input should be 'tiny'"),
])
def test_every_bad_call_is_an_error_in_genloops_format_and_starts_nothing(
        tools, client, arguments, expected):
    async def body(session):
        return await session.call_tool("run_loop", arguments)

    result = _session(tools, body)

    assert result.is_error and result.structured_content is None
    text = result.content[0].text
    assert text.startswith("Invalid arguments for run_loop:") and expected in text
    assert "call run_loop again" in text and "pydantic" not in text
    assert run_count(client) == 0


class HttpServer:
    """``build_server(tools).streamable_http_app()`` under uvicorn on a free port."""

    def __init__(self, tools) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        app = build_server(tools).streamable_http_app()
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self) -> HttpServer:
        self.thread.start()
        while not self.server.started:
            assert self.thread.is_alive(), "the MCP HTTP server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.mark.slow
def test_streamable_http_at_mcp_serves_every_point_a_host_relies_on(tools):
    from mcp.shared.exceptions import MCPError

    async def main(url):
        async with Client(url) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            missing = await session.call_tool("run_loop", {"rounds": 2})
            misspelt = await session.call_tool("run_loop", {**LOOP, "candidate": 3})
            paused = await session.call_tool("run_loop", {**LOOP, "refiner": "agent",
                                                          "seed": 21})
            gone = await session.call_tool("get_result", {"run_id": "missing"})
            await session.call_tool("cancel_run", {"run_id": paused.structured_content["run_id"]})
            progress = ProgressLog()  # the server is warm now: a loop has run a round
            done = await session.call_tool("run_loop", {**LOOP, "seed": 22},
                                           progress_callback=progress)
            uri = f"genloop://runs/{done.structured_content['run_id']}/result"
            compact = (await session.read_resource(uri)).contents[0].text
            with pytest.raises(MCPError) as unknown:
                await session.read_resource("genloop://artifacts/nosuchkey")
            return listed, missing, misspelt, paused, gone, progress, done, compact, unknown

    with HttpServer(tools) as server:
        listed, missing, misspelt, paused, gone, progress, done, compact, unknown = asyncio.run(
            main(server.url))

    assert list(listed) == list(tools.specs)
    assert all(t.output_schema == output_schema() for t in listed.values())
    assert missing.is_error and "- prompt: Field required" in missing.content[0].text
    assert misspelt.is_error and "- candidate: Extra inputs" in misspelt.content[0].text
    found = ToolResult.model_validate(paused.structured_content)
    assert not found.done and found.refine is not None and found.refine.candidates == 2
    assert gone.is_error and "Check the run_id" in gone.content[0].text
    assert_labelled_loop_result(done)
    progress.assert_one_per_event()
    assert progress.seen[0][0] < 1.0, progress.seen[:3]  # the first within 1 s, warm
    assert '"embedding"' not in compact and json.loads(compact)["status"] == "succeeded"
    assert "malformed artifact key" in str(unknown.value)
    assert "Error creating resource" not in str(unknown.value)


#: What a host hands a model for the six tools (name, description, input schema; compact JSON),
#: in characters. Counted with npm's gpt-tokenizer 4.0.0 (o200k_base, which ships its
#: vocabulary) on 2026-12-05: the default catalog 1,268 tokens in 5,261 characters, run_loop 384
#: in 1,529; the catalog `genloop mcp --local` serves 1,298 in 5,351, run_loop 399 in 1,574. The
#: fewest characters a token seen in these schemas is 3.94, so the budgets (1,800 tokens,
#: run_loop 500) are held at 3.9 characters a token.
TOOLS_CHARS, RUN_LOOP_CHARS = 7_020, 1_950


@pytest.mark.parametrize("served", [False, True], ids=["default", "served"])
def test_the_tools_a_model_reads_stay_within_their_token_budget(client, served):
    from genloop.integrations import Catalog, GenloopTools

    catalog = shipped_served_catalog() if served else Catalog()

    async def body(session):
        return (await session.list_tools()).tools

    listed = _session(GenloopTools(client, catalog=catalog), body)

    chars = {t.name: len(json.dumps({"name": t.name, "description": t.description,
                                     "inputSchema": t.input_schema}, separators=(",", ":")))
             for t in listed}
    assert sum(chars.values()) <= TOOLS_CHARS and chars["run_loop"] <= RUN_LOOP_CHARS
