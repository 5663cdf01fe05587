"""A LangChain agent loop that calls genloop's ``run_loop`` tool and gets an image back.

The chat model is scripted (langchain-core's ``GenericFakeChatModel``) so the example runs
offline; with a real tool-calling model, use ``model.bind_tools(tools)`` and the same loop.

    python examples/langchain_agent.py [--home .genloop] [--out out/langchain]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from genloop.integrations import Catalog
from genloop.integrations.langchain import GenloopToolkit
from genloop.sdk import Client


def scripted_model(prompt: str, steps: int | None) -> GenericFakeChatModel:
    """A chat model that asks for one loop, then answers once it has seen the result."""
    call = {"name": "run_loop", "id": "call-1", "type": "tool_call",
            "args": {"prompt": prompt, "rounds": 2, "candidates": 2, "steps": steps}}
    return GenericFakeChatModel(messages=iter([
        AIMessage(content="", tool_calls=[call]),
        AIMessage(content="Done: the best image is saved."),
    ]))


def main(home: str, out: Path, model: str, evaluator: str, steps: int | None) -> list[Path]:
    prompt = "a large red circle in the centre, black background"
    chat = scripted_model(prompt, steps)
    saved: list[Path] = []
    with Client.local(home=home) as client:
        toolkit = GenloopToolkit.from_client(
            client, catalog=Catalog(models=(model,), evaluators=(evaluator,)))
        tools = {tool.name: tool for tool in toolkit.get_tools()}
        messages: list[BaseMessage] = [HumanMessage(f"Make me an image of {prompt}.")]
        while True:  # the agent loop: the model asks, the tools answer, until it is done
            reply = chat.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                message = tools[call["name"]].invoke(call)
                messages.append(message)
                print(f"[{call['name']}] {message.content}")
                for image in message.artifact.images:
                    out.mkdir(parents=True, exist_ok=True)
                    path = out / f"{message.artifact.run_id}-{image.label.replace(' ', '-')}.png"
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
