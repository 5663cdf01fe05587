"""OpenAI-style tools: strict schemas, the framework-free dispatcher, and the OpenAI Agents SDK
``FunctionTool``s invoked offline (no key, no network)."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re

import pytest
from agent_tools import (
    CATALOG,
    CATALOG_TOOLS,
    GENERATE,
    LOOP,
    load_example,
    run_count,
    shipped_served_catalog,
)
from jsonschema import Draft202012Validator

from genloop.integrations import Catalog, dispatch, openai_tools

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


#: The strict functions in compact JSON, in characters: npm's gpt-tokenizer 4.0.0 (o200k_base)
#: counted on 2026-12-05 1,525 tokens in 6,327 characters for the default catalog, run_loop 473
#: in 1,901; 1,555 in 6,417 for the catalog `genloop mcp --local` serves, run_loop 488 in 1,946.
#: Budgets of 1,800 tokens (run_loop 500) at 3.9 characters a token; run_loop's at the fewest
#: seen, 3.94 (1,970): with shapes-reader served it is 1,962 characters, at most 498 tokens.
FUNCTIONS_CHARS, RUN_LOOP_CHARS = 7_020, 1_970


@pytest.mark.parametrize("served", [False, True], ids=["default", "served"])
def test_the_functions_a_model_reads_stay_within_their_token_budget(client, served):
    catalog = shipped_served_catalog() if served else Catalog()

    chars = {e["function"]["name"]: len(json.dumps(e, separators=(",", ":")))
             for e in openai_tools(catalog)}

    assert sum(chars.values()) <= FUNCTIONS_CHARS and chars["run_loop"] <= RUN_LOOP_CHARS


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

from genloop.integrations.openai_agents import tool_result  # noqa: E402


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
        text, fields, *images = outputs[name]
        assert isinstance(text, ToolOutputText) and finished_run in outputs["get_run"][0].text
        found = tool_result(outputs[name])
        assert fields.text.startswith("{") and found.done and found.run_id in text.text
        assert [im.artifact for im in found.images] == re.findall(
            r"^- [^:]+: (\S+), score", text.text, flags=re.M)
        assert len(images) == len(found.images)
        assert all(isinstance(im, ToolOutputImage) for im in images)
        data = images[0].image_url.removeprefix("data:image/png;base64,")
        assert base64.b64decode(data).startswith(PNG)
    assert isinstance(outputs["cancel_run"][0], ToolOutputText)


@pytest.mark.slow
def test_a_paused_loop_is_recognisable_from_the_structured_output(shared_tools):
    from genloop.integrations.openai_agents import function_tools

    loop = function_tools(shared_tools)[1]

    paused = tool_result(_invoke(loop, {**LOOP, "refiner": "agent", "seed": 31}))

    assert not paused.done and paused.refine.node_id == "round-1/refine"
    assert paused.refine.candidates == 2 and paused.refine.scored
    shared_tools.call("cancel_run", {"run_id": paused.run_id})


@pytest.mark.slow
def test_runner_run_with_an_offline_model_chooses_run_loop_and_answers(shared_client):
    from agents import ToolCallOutputItem

    example = load_example("openai_agents_tool.py")

    run = asyncio.run(example.run_agent(shared_client, CATALOG, 'Draw "a red circle".',
                                        {"rounds": 2, "candidates": 2, "steps": 2}))

    calls = [item for item in run.new_items if isinstance(item, ToolCallOutputItem)]
    assert [c.call_id for c in calls] == ["call-1"]
    found = tool_result(calls[0].output)
    assert found.done and found.status == "succeeded"
    assert run.final_output == (f"Done: the best image is {found.best.artifact} "
                                f"(score {found.best.score:.2f}).")
    assert run.last_agent.model.offered == list(CATALOG_TOOLS)


@pytest.mark.parametrize(("arguments", "expected"), [
    ({**LOOP, "refiner": "magic"}, "- refiner: Input should be 'seed-search'"),
    ({k: v for k, v in LOOP.items() if k != "prompt"}, "- prompt: Field required"),
    ({**LOOP, "candidate": 3}, "- candidate: Extra inputs are not permitted"),
])
def test_a_bad_call_returns_readable_text(tools, client, arguments, expected):
    from genloop.integrations.openai_agents import function_tools

    loop = function_tools(tools)[1]

    out = _invoke(loop, arguments)

    assert isinstance(out, str) and out.startswith("Invalid arguments for run_loop:")
    assert expected in out and "pydantic" not in out
    assert tool_result(out) is None  # nothing for an application to mistake for a run
    assert run_count(client) == 0
