"""A LangChain agent loop: a tool-calling chat model is given genloop's tools with
``bind_tools``, chooses ``run_loop``, reads the result and answers.

The chat model here is a small scripted one (:class:`ScriptedChatModel`), so the example runs
offline; it chooses among the tools ``bind_tools`` gave it and reads only what a real model
reads (the tool messages' text). With a real model, ``ChatOpenAI(...).bind_tools(tools)`` and
the same loop.

    python examples/langchain_agent.py [--home .genloop] [--out out/langchain]
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from genloop.integrations import Catalog, ToolOutput
from genloop.integrations.langchain import GenloopToolkit
from genloop.sdk import Client

PROMPT = "a large red circle in the centre, black background"


class ScriptedChatModel(BaseChatModel):
    """A stand-in for a tool-calling model: asked for an image, it calls ``run_loop`` (if it
    was bound) with the prompt in quotes; given the tool's answer, it reports the best score.

    ``bind_tools`` works as a real chat model's does: the tools travel, as OpenAI function
    schemas, in the ``tools`` keyword of every call; what the model may call is what is there.
    """

    arguments: dict[str, Any] = {}  # run_loop's arguments besides the prompt

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[BaseTool], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        offered = {t["function"]["name"] for t in kwargs.get("tools", [])}
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=_answer(str(last.content)))
        elif "run_loop" in offered:
            prompt = re.search(r'"([^"]+)"', str(last.content))
            args = {"prompt": prompt.group(1) if prompt else str(last.content), **self.arguments}
            reply = AIMessage(content="", tool_calls=[
                {"name": "run_loop", "args": args, "id": "call-1", "type": "tool_call"}])
        else:
            reply = AIMessage(content="I have no image tool to call.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _answer(tool_text: str) -> str:
    """What the model says after reading the tool's text (the best line, or the pause)."""
    best = re.search(r"- best: (\S+), score ([\d.]+)", tool_text)
    if best:
        return f"Done: the best image is {best.group(1)} (score {best.group(2)})."
    return "The loop has not finished: " + tool_text.splitlines()[0]


def run_agent(client: Client, catalog: Catalog, request: str,
              arguments: dict[str, Any]) -> list[BaseMessage]:
    """The agent loop: the model asks, the tools answer, until the model answers in text."""
    tools = {t.name: t for t in GenloopToolkit.from_client(client, catalog=catalog).get_tools()}
    model = ScriptedChatModel(arguments=arguments).bind_tools(list(tools.values()))
    messages: list[BaseMessage] = [HumanMessage(request)]
    while True:
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        messages += [tools[call["name"]].invoke(call) for call in reply.tool_calls]


def main(home: str, out: Path, model: str, evaluator: str, steps: int | None) -> list[Path]:
    arguments = {"rounds": 2, "candidates": 2, "steps": steps}
    saved: list[Path] = []
    with Client.local(home=home) as client:
        catalog = Catalog(models=(model,), evaluators=(evaluator,))
        messages = run_agent(client, catalog, f'Make me an image of "{PROMPT}".', arguments)
    for message in messages:
        if isinstance(message, ToolMessage) and isinstance(message.artifact, ToolOutput):
            result = message.artifact  # the application's view: the fields and the PNGs
            print(f"[{message.name}] {message.content}")
            print(json.dumps(result.structured().model_dump(mode="json", include={
                "done", "run_id", "status", "best"})))
            for image in result.images:
                out.mkdir(parents=True, exist_ok=True)
                path = out / f"{result.run_id}-{image.label.replace(' ', '-')}.png"
                path.write_bytes(image.png)
                saved.append(path)
    print(f"[agent] {messages[-1].content} ({len(saved)} image(s) in {out})")
    return saved


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".genloop")
    parser.add_argument("--out", default="out/langchain")
    parser.add_argument("--model", default="shapes")
    parser.add_argument("--evaluator", default="shapes-clip")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    main(args.home, Path(args.out), args.model, args.evaluator, args.steps)
