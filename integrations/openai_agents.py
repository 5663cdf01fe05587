"""OpenAI Agents SDK tools over genloop (``pip install 'genloop[openai-agents]'``)::

    from agents import Agent
    from genloop.integrations.openai_agents import function_tools

    agent = Agent(name="designer", tools=function_tools(Client.local()))

Each tool is a ``FunctionTool`` with the strict schema of :func:`~.openai_schema.strict_schema`.
Its output is the text, then the :class:`~.result.ToolResult` as JSON text (``done``,
``run_id``, ``best``, ``refine`` ...: what the model and the application read to tell a finished
run from a paused one; :func:`tool_result` parses it back), then each image as a
``ToolOutputImage`` (a PNG data URL), which the SDK hands to the model as image input. A failed
call returns its message as text (the SDK's way of letting the model correct itself); nothing is
raised into the agent run.
"""

from __future__ import annotations

import base64
from typing import Any

from agents import FunctionTool, ToolOutputImage, ToolOutputText
from agents.tool_context import ToolContext

from genloop.sdk import AsyncClient, Client

from .catalog import Catalog
from .openai_schema import adispatch, strict_schema
from .outcome import ToolOutput
from .result import ToolResult
from .tools import GenloopTools, ToolSpec


def tool_outputs(out: ToolOutput) -> list[ToolOutputText | ToolOutputImage]:
    """A tool output as the Agents SDK's structured outputs: text, the result's JSON, images."""
    images = [
        ToolOutputImage(image_url="data:image/png;base64," + base64.b64encode(im.png).decode())
        for im in out.images
    ]
    return [ToolOutputText(text=out.text),
            ToolOutputText(text=out.structured().model_dump_json(exclude_defaults=True)), *images]


def tool_result(output: Any) -> ToolResult | None:
    """The :class:`~.result.ToolResult` in a tool's output, as the run's items hold it (the
    list :func:`tool_outputs` made, or its dict form in the model's input); None for a failed
    call's text."""
    for item in output if isinstance(output, list) else ():
        text = item.text if isinstance(item, ToolOutputText) else (
            item.get("text") if isinstance(item, dict) else None)
        if text and text.startswith("{"):
            return ToolResult.model_validate_json(text)
    return None


def _function_tool(tools: GenloopTools, spec: ToolSpec) -> FunctionTool:
    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        out = await adispatch(tools, spec.name, arguments)
        return out.text if out.error else tool_outputs(out)

    return FunctionTool(name=spec.name, description=spec.description,
                        params_json_schema=strict_schema(spec.arguments), on_invoke_tool=invoke,
                        strict_json_schema=True)


def function_tools(client: Client | AsyncClient | GenloopTools, *,
                   catalog: Catalog | None = None) -> list[FunctionTool]:
    """Every genloop tool as an Agents SDK ``FunctionTool``, over ``client``."""
    tools = client if isinstance(client, GenloopTools) else GenloopTools(client, catalog=catalog)
    return [_function_tool(tools, spec) for spec in tools.specs.values()]
