"""An OpenAI Agents SDK agent with genloop's tools, run by ``Runner.run``: the model chooses
``run_loop``, reads the result and answers. No API key, no network.

The model is a small offline one (:class:`ScriptedModel`, an ``agents.Model``): it chooses among
the tools the agent offers it and reads only what a real model reads (the tool's output items).
With a real model, leave ``model=`` out of the ``Agent`` and set ``OPENAI_API_KEY``.

    python examples/openai_agents_tool.py [--home .genloop] [--out out/openai-agents]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, ToolCallOutputItem, Usage
from agents.tool import ToolOutputImage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from genloop.integrations import Catalog
from genloop.integrations.openai_agents import function_tools, tool_result
from genloop.sdk import Client

PROMPT = "a large red circle in the centre, black background"


class ScriptedModel(Model):
    """A stand-in for a model: asked for an image, it calls ``run_loop`` (if the agent offers
    it) with the prompt in quotes; given the tool's output, it reports the best image, or that
    the loop waits for it."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments  # run_loop's arguments besides the prompt
        self.offered: list[str] = []

    async def get_response(self, system_instructions: str | None, input: Any,
                           model_settings: Any, tools: list[Any], output_schema: Any,
                           handoffs: list[Any], tracing: Any, **kwargs: Any) -> ModelResponse:
        self.offered = [t.name for t in tools]
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        last = items[-1]
        if last.get("type") == "function_call_output":
            return _response(_message(_answer(last["output"])))
        if "run_loop" not in self.offered:
            return _response(_message("I have no image tool to call."))
        prompt = re.search(r'"([^"]+)"', str(last.get("content")))
        args = {name: None for name in _parameters(tools, "run_loop")}  # strict: all required
        args |= {"prompt": prompt.group(1) if prompt else str(last.get("content")),
                 **self.arguments}
        return _response(ResponseFunctionToolCall(
            type="function_call", name="run_loop", call_id="call-1", id="fc-1",
            arguments=json.dumps(args)))

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this offline model answers Runner.run only")


def _parameters(tools: list[Any], name: str) -> list[str]:
    tool = next(t for t in tools if t.name == name)
    return list(tool.params_json_schema["properties"])


def _answer(output: Any) -> str:
    """What the model says after reading the tool's output items (their JSON result)."""
    result = tool_result(output)
    if result is None:  # a failed call: its text
        return f"The call failed: {output}"
    if result.refine is not None:
        return f"Run {result.run_id} is paused for me at {result.refine.node_id}."
    if result.best is None:
        return f"Run {result.run_id} is {result.status}, with no image yet."
    return f"Done: the best image is {result.best.artifact} (score {result.best.score:.2f})."


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg-1", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def _response(item: Any) -> ModelResponse:
    return ModelResponse(output=[item], usage=Usage(), response_id=None)


async def run_agent(client: Client, catalog: Catalog, request: str,
                    arguments: dict[str, Any]) -> Any:
    """``Runner.run`` of an agent with genloop's tools and the offline model."""
    agent = Agent(name="designer", instructions="Make the image the user asks for.",
                  model=ScriptedModel(arguments), tools=function_tools(client, catalog=catalog))
    return await Runner.run(agent, request, run_config=RunConfig(tracing_disabled=True))


def main(home: str, out: Path, model: str, evaluator: str, steps: int | None) -> list[Path]:
    arguments = {"rounds": 2, "candidates": 2, "steps": steps}
    with Client.local(home=home) as client:
        catalog = Catalog(models=(model,), evaluators=(evaluator,))
        run = asyncio.run(run_agent(client, catalog, f'Make me an image of "{PROMPT}".',
                                    arguments))
    saved = []
    for item in run.new_items:
        if isinstance(item, ToolCallOutputItem):  # the application's view of the tool's output
            print(item.output[0].text)
            print(tool_result(item.output).model_dump_json(include={"done", "run_id", "best"}))
            images = [o for o in item.output if isinstance(o, ToolOutputImage)]
            out.mkdir(parents=True, exist_ok=True)
            for i, image in enumerate(images):
                path = out / f"image-{i}.png"
                path.write_bytes(base64.b64decode(image.image_url.split(",", 1)[1]))
                saved.append(path)
    print(f"[agent] {run.final_output} ({len(saved)} image(s) in {out})")
    return saved


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".genloop")
    parser.add_argument("--out", default="out/openai-agents")
    parser.add_argument("--model", default="shapes")
    parser.add_argument("--evaluator", default="shapes-clip")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    main(args.home, Path(args.out), args.model, args.evaluator, args.steps)
