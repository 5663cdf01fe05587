"""LangChain's own standard suites (langchain-tests) for every genloop tool, plus what they
do not cover: the artifact, async over a native AsyncClient, error tool messages."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from agent_tools import CATALOG, GENERATE, LOOP, load_example, run_count

pytest.importorskip("langchain_core")

from langchain_core.messages import HumanMessage, ToolMessage  # noqa: E402
from langchain_tests.integration_tests import ToolsIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import ToolsUnitTests  # noqa: E402

from genloop.integrations import DESCRIPTIONS, GenloopTools, ToolOutput, ToolResult  # noqa: E402
from genloop.integrations.langchain import (  # noqa: E402
    CancelRunTool,
    GenerateImagesTool,
    GenloopToolkit,
    GetResultTool,
    GetRunTool,
    RefineRunTool,
    RunLoopTool,
)
from genloop.sdk import AsyncClient, RunStatus  # noqa: E402
from genloop.sdk.aio import ThreadedBackend  # noqa: E402

pytestmark = pytest.mark.slow


class _Standard:
    """Binds a standard suite to the module's shared tools; subclasses name the tool and args."""

    tool_class: type
    example: dict[str, Any] = {}

    @pytest.fixture(autouse=True)
    def _genloop(self, shared_tools, finished_run):
        self._tools = shared_tools
        self._run_id = finished_run

    @property
    def tool_constructor(self):
        return self.tool_class

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"tools": self._tools}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return self.example or {"run_id": self._run_id}


class _GenerateImages(_Standard):
    tool_class = GenerateImagesTool
    example = GENERATE


class _RunLoop(_Standard):
    tool_class = RunLoopTool
    example = LOOP


class _GetRun(_Standard):
    tool_class = GetRunTool


class _GetResult(_Standard):
    tool_class = GetResultTool


class _CancelRun(_Standard):
    tool_class = CancelRunTool


class _RefineRun(_Standard):
    tool_class = RefineRunTool
    example = {"run_id": "r1", "requests": [{"prompt": "a red circle", "seed": 5}]}


class _RefineRunPaused(_RefineRun):
    """Each invocation answers a loop of its own, paused for the agent: only one answer to a
    pause counts (a second is a tool error). Each loop has a seed of its own, or it would be
    the stored run of the one before."""

    seeds = itertools.count(1000)

    @pytest.fixture(autouse=True)
    def _paused(self, shared_tools):
        out = shared_tools.call("run_loop", {**LOOP, "refiner": "agent", "wait_seconds": 300,
                                             "seed": next(self.seeds)})
        assert out.refine is not None, out.text
        self.example = {**self.example, "run_id": out.run_id, "wait_seconds": 120}


class TestGenerateImagesUnit(_GenerateImages, ToolsUnitTests): ...
class TestGenerateImagesIntegration(_GenerateImages, ToolsIntegrationTests): ...
class TestRunLoopUnit(_RunLoop, ToolsUnitTests): ...
class TestRunLoopIntegration(_RunLoop, ToolsIntegrationTests): ...
class TestGetRunUnit(_GetRun, ToolsUnitTests): ...
class TestGetRunIntegration(_GetRun, ToolsIntegrationTests): ...
class TestGetResultUnit(_GetResult, ToolsUnitTests): ...
class TestGetResultIntegration(_GetResult, ToolsIntegrationTests): ...
class TestCancelRunUnit(_CancelRun, ToolsUnitTests): ...
class TestCancelRunIntegration(_CancelRun, ToolsIntegrationTests): ...
class TestRefineRunUnit(_RefineRun, ToolsUnitTests): ...
class TestRefineRunIntegration(_RefineRunPaused, ToolsIntegrationTests): ...


def _call(tool, args: dict[str, Any]) -> ToolMessage:
    return tool.invoke({"name": tool.name, "args": args, "id": "call-1", "type": "tool_call"})


def test_toolkit_lists_every_tool_with_its_schema(shared_tools):
    tools = GenloopToolkit(tools=shared_tools).get_tools()

    assert [t.name for t in tools] == list(shared_tools.specs)
    loop = tools[1].args
    assert loop["model"].get("enum", [loop["model"].get("const")]) == ["tiny"]
    assert all(t.description == DESCRIPTIONS[t.name] for t in tools)


def test_run_loop_message_carries_text_and_the_structured_result_as_artifact(shared_tools):
    message = _call(RunLoopTool(shared_tools), LOOP)

    assert message.status == "success" and "score" in message.content
    out = message.artifact
    assert isinstance(out, ToolOutput) and isinstance(out.structured(), ToolResult)
    assert out.done and out.run_id in message.content and out.refine is None
    assert out.best.artifact == out.images[0].artifact and out.best.label == "best"
    assert [r.round for r in out.rounds] == [1, 2]
    assert all(f"{im.label}: {im.artifact}" in message.content for im in out.images)
    assert out.images[0].png.startswith(b"\x89PNG")


def test_a_paused_loop_is_recognisable_from_the_artifact_fields(shared_tools):
    message = _call(RunLoopTool(shared_tools), {**LOOP, "refiner": "agent", "seed": 41})

    out = message.artifact
    assert message.status == "success" and not out.done and out.status == RunStatus.RUNNING
    assert out.refine.node_id == "round-1/refine" and out.refine.candidates == 2
    assert out.best.artifact == out.refine.scored[0].artifact
    shared_tools.call("cancel_run", {"run_id": out.run_id})


def test_a_tool_calling_chat_model_chooses_run_loop_gets_the_result_and_answers(shared_client):
    example = load_example("langchain_agent.py")

    messages = example.run_agent(shared_client, CATALOG, 'Draw "a red circle".',
                                 {"rounds": 2, "candidates": 2, "steps": 2})

    human, call, result, answer = messages
    assert [c["name"] for c in call.tool_calls] == ["run_loop"]
    assert call.tool_calls[0]["args"]["prompt"] == "a red circle"
    assert isinstance(result, ToolMessage) and result.artifact.done
    best = result.artifact.best
    assert answer.content == f"Done: the best image is {best.artifact} (score {best.score:.2f})."


def test_the_scripted_model_calls_only_tools_it_was_bound():
    example = load_example("langchain_agent.py")
    model = example.ScriptedChatModel()

    unbound = model.invoke([HumanMessage('Draw "a red circle".')])

    assert not unbound.tool_calls  # without bind_tools it has nothing to call


def test_ainvoke_runs_natively_on_an_async_client(shared_client):
    aclient = AsyncClient(ThreadedBackend(shared_client.backend))
    tool = RunLoopTool(GenloopTools(aclient, catalog=CATALOG))

    message = asyncio.run(tool.ainvoke(
        {"name": "run_loop", "args": LOOP, "id": "c", "type": "tool_call"}))

    assert message.artifact.status == RunStatus.SUCCEEDED
    assert "call them asynchronously" in tool.invoke(LOOP)  # no sync client: a readable error


@pytest.mark.parametrize(("arguments", "expected"), [
    ({**LOOP, "model": "sdxl", "rounds": 0}, ("- model: Input should be 'tiny'", "- rounds:")),
    ({k: v for k, v in LOOP.items() if k != "prompt"}, ("- prompt: Field required",)),
    ({**LOOP, "candidate": 3}, ("- candidate: Extra inputs are not permitted",)),
])
def test_bad_arguments_come_back_as_an_error_message_and_create_nothing(
        tools, client, arguments, expected):
    message = _call(RunLoopTool(tools), arguments)

    assert message.status == "error" and message.artifact is None
    assert message.content.startswith("Invalid arguments for run_loop:")
    assert all(line in message.content for line in expected)
    assert "call run_loop again" in message.content and "pydantic" not in message.content
    assert run_count(client) == 0


def test_an_unknown_run_is_an_error_message(shared_tools):
    message = _call(GetRunTool(shared_tools), {"run_id": "gone", "wait_seconds": 0})

    assert message.status == "error" and "Check the run_id" in message.content
