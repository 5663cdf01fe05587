"""OpenAI-style tools: strict schemas, the framework-free dispatcher, and the OpenAI Agents SDK
``FunctionTool``s invoked offline (no key, no network)."""

from __future__ import annotations

import asyncio
import base64
import copy
import json

import pytest
from agent_tools import CATALOG, GENERATE, LOOP, run_count
from jsonschema import Draft202012Validator

from genloop.integrations import dispatch, openai_tools

PNG = b"\x89PNG\r\n\x1a\n"


def _objects(schema):
    """Every object schema inside ``schema`` (strict mode's rules apply to each)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


@pytest.mark.parametrize("entry", openai_tools(CATALOG), ids=lambda e: e["function"]["name"])
def test_every_schema_is_strict(entry):
    from agents.strict_schema import ensure_strict_json_schema

    fn = entry["function"]
    schema = fn["parameters"]

    assert fn["strict"] is True and fn["description"]
    Draft202012Validator.check_schema(schema)
    assert ensure_strict_json_schema(copy.deepcopy(schema)) == schema  # nothing left to fix
    for obj in _objects(schema):
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    assert '"default"' not in json.dumps(schema)  # strict mode refuses the keyword
    assert all(p.get("description") for p in schema["properties"].values())


def test_a_strict_call_with_nulls_validates_and_means_the_defaults(tools):
    schema = openai_tools(CATALOG)[1]["function"]["parameters"]
    call = {name: None for name in schema["properties"]} | {"prompt": "a cat"}

    Draft202012Validator(schema).validate(call)
    args = tools.parse("run_loop", call)
    assert (args.rounds, args.model, args.refiner) == (3, "tiny", "seed-search")


@pytest.mark.slow
def test_dispatch_runs_a_call_from_its_json_arguments(tools):
    out = dispatch(tools, "generate_images", json.dumps(GENERATE))

    assert not out.error and out.images[0].png.startswith(PNG)


def test_dispatch_returns_errors_as_output_and_creates_nothing(tools, client):
    bad = dispatch(tools, "run_loop", json.dumps({**LOOP, "candidates": 0}))
    broken = dispatch(tools, "run_loop", "{not json")

    assert bad.error and "- candidates:" in bad.text
    assert broken.error and "not valid JSON" in broken.text
    assert run_count(client) == 0


agents = pytest.importorskip("agents")


def _invoke(tool, arguments: dict) -> object:
    from agents.tool_context import ToolContext

    raw = json.dumps(arguments)
    context = ToolContext(context=None, tool_name=tool.name, tool_call_id="call-1",
                          tool_arguments=raw)
    return asyncio.run(tool.on_invoke_tool(context, raw))


def test_function_tools_carry_the_strict_schemas(tools):
    from genloop.integrations.openai_agents import function_tools

    built = function_tools(tools)

    assert [t.name for t in built] == list(tools.specs)
    assert all(t.strict_json_schema for t in built)
    assert [t.params_json_schema for t in built] == [
        e["function"]["parameters"] for e in openai_tools(CATALOG)]


@pytest.mark.slow
def test_every_function_tool_invokes_offline(shared_tools, finished_run):
    from agents import ToolOutputImage, ToolOutputText

    from genloop.integrations.openai_agents import function_tools

    by_name = {t.name: t for t in function_tools(shared_tools)}
    examples = {"generate_images": GENERATE, "run_loop": LOOP,
                "get_run": {"run_id": finished_run}, "get_result": {"run_id": finished_run},
                "cancel_run": {"run_id": finished_run}}

    outputs = {name: _invoke(by_name[name], args) for name, args in examples.items()}

    for name in ("generate_images", "run_loop", "get_run", "get_result"):
        text, *images = outputs[name]
        assert isinstance(text, ToolOutputText) and finished_run in outputs["get_run"][0].text
        assert images and all(isinstance(im, ToolOutputImage) for im in images)
        data = images[0].image_url.removeprefix("data:image/png;base64,")
        assert base64.b64decode(data).startswith(PNG)
    assert isinstance(outputs["cancel_run"][0], ToolOutputText)


def test_a_bad_call_returns_readable_text(tools, client):
    from genloop.integrations.openai_agents import function_tools

    loop = function_tools(tools)[1]

    out = _invoke(loop, {**LOOP, "refiner": "magic"})

    assert isinstance(out, str) and "- refiner:" in out and "'seed-search'" in out
    assert run_count(client) == 0
