"""``genloop mcp`` as a subprocess, run as the README tells a host to, through the official SDK's
client: over stdio (what a host such as Claude Desktop sees) and over streamable HTTP at
``/mcp``."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_tools import LOOP, ProgressLog, assert_labelled_loop_result

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from genloop.integrations import ToolResult  # noqa: E402

pytestmark = pytest.mark.slow

PALETTE = {"brand-palette": {"palette": ["#ff0000"]}}
README = Path(__file__).resolve().parents[2] / "docs" / "agents.md"  # the README's details
GENLOOP = str(Path(sys.executable).with_name("genloop"))


def test_genloop_mcp_over_stdio(tmp_path):
    # Given `genloop mcp` on an embedded back end, with one evaluator configured by the operator
    server = StdioServerParameters(
        command=GENLOOP,
        args=["mcp", "--local", str(tmp_path / "home"), "--threads", "2", "--models", "tiny",
              "--evaluator-options", json.dumps(PALETTE)])

    async def session():
        async with Client(server) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            missing = await client.call_tool("run_loop", {"rounds": 1})
            misspelt = await client.call_tool("run_loop", {**LOOP, "candidate": 3})
            paused = await client.call_tool("run_loop", {**LOOP, "refiner": "agent",
                                                         "evaluator": "clip"})
            await client.call_tool("cancel_run", {"run_id": paused.structured_content["run_id"]})
            progress = ProgressLog()  # the server is warm now: a loop has run a round
            done = await client.call_tool("run_loop", {**LOOP, "evaluator": "clip", "seed": 9},
                                          progress_callback=progress)
            uri = f"genloop://runs/{done.structured_content['run_id']}/result"
            compact = (await client.read_resource(uri)).contents[0].text
            with pytest.raises(MCPError) as unknown:
                await client.read_resource("genloop://runs/nosuchrun/result")
            return listed, missing, misspelt, paused, progress, done, compact, unknown

    # When a host lists the tools, makes a bad call, a misspelt one, a pausing one, then on the
    # warm server a loop that ends, and reads its result and a run that does not exist
    listed, missing, misspelt, paused, progress, done, compact, unknown = asyncio.run(session())

    # Then only evaluators a call can use are offered (the configured one among them)
    evaluators = listed["run_loop"].input_schema["properties"]["evaluator"]["enum"]
    assert "brand-palette" in evaluators and "clip" in evaluators
    assert not {"hf-clip", "aesthetic", "composite"} & set(evaluators)
    assert listed["run_loop"].output_schema["properties"]["refine"]
    # and both bad calls say what to fix in genloop's words, naming the field
    assert missing.is_error and "- prompt: Field required" in missing.content[0].text
    assert misspelt.is_error and "- candidate: Extra inputs" in misspelt.content[0].text
    # and the pause is in the structured content
    pause = ToolResult.model_validate(paused.structured_content)
    assert not pause.done and pause.refine.node_id == "round-1/refine"
    # and the loop that ended has structured content and labelled images; its progress came one
    # notification per event, the first within a second of the call
    assert_labelled_loop_result(done)
    progress.assert_one_per_event()
    assert progress.seen[0][0] < 1.0, progress.seen[:3]
    # and resources are compact, and an unknown one is an error a host can show
    assert '"embedding"' not in compact and json.loads(compact)["status"] == "succeeded"
    assert "Use a run_id" in str(unknown.value)
    assert "Error creating resource" not in str(unknown.value)


def test_the_readme_host_configuration_is_the_command_these_tests_run():
    blocks = re.findall(r"```json\n(.*?)```", README.read_text(), re.S)
    config = json.loads(next(b for b in blocks if '"mcpServers"' in b))
    server = config["mcpServers"]["genloop"]

    assert Path(server["command"]).name == "genloop"
    assert server["args"][:2] == ["mcp", "--local"]
    assert "`http://H:8765/mcp`" in README.read_text()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_genloop_mcp_over_streamable_http_answers_at_slash_mcp(tmp_path):
    # Given `genloop mcp --transport streamable-http` on a free port, as the README runs it
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [GENLOOP, "mcp", "--local", str(tmp_path / "home"), "--threads", "1", "--models",
         "tiny", "--transport", "streamable-http", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _listening(port):
            assert proc.poll() is None and time.monotonic() < deadline, "it did not start"
            time.sleep(0.2)

        async def session():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return (await client.list_tools()).tools

        # When a client connects to the endpoint the README names
        listed = asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    # Then it lists the six tools, each with its outputSchema
    assert [t.name for t in listed] == ["generate_images", "run_loop", "get_run", "get_result",
                                        "cancel_run", "refine_run"]
    assert all(t.output_schema["properties"]["done"] for t in listed)
