"""``genloop mcp`` as a subprocess, over stdio, through the official SDK's client: what a host
such as Claude Desktop sees."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from agent_tools import LOOP

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from genloop.integrations import ToolResult  # noqa: E402

pytestmark = pytest.mark.slow

PALETTE = {"brand-palette": {"palette": ["#ff0000"]}}


def test_genloop_mcp_over_stdio(tmp_path):
    # Given `genloop mcp` on an embedded back end, with one evaluator configured by the operator
    server = StdioServerParameters(
        command=str(Path(sys.executable).with_name("genloop")),
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
            return listed, missing, misspelt, paused

    # When a host lists the tools and makes a bad call, a misspelt one and a pausing one
    listed, missing, misspelt, paused = asyncio.run(session())

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
