"""genloop's tools in the OpenAI Agents SDK, invoked directly (no API key, no network).

An ``Agent(tools=function_tools(client))`` calls them the same way when its model asks; here we
play the model's part and invoke ``run_loop`` with the JSON arguments a model would send.

    python examples/openai_agents_tool.py [--home .genloop] [--out out/openai-agents]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from pathlib import Path

from agents import ToolOutputImage
from agents.tool_context import ToolContext

from genloop.integrations import Catalog
from genloop.integrations.openai_agents import function_tools
from genloop.sdk import Client


def main(home: str, out: Path, model: str, evaluator: str, steps: int | None) -> list[Path]:
    arguments = json.dumps({"prompt": "a large red circle in the centre, black background",
                            "rounds": 2, "candidates": 2, "steps": steps})
    with Client.local(home=home) as client:
        tools = {t.name: t for t in function_tools(
            client, catalog=Catalog(models=(model,), evaluators=(evaluator,)))}
        print("tools:", ", ".join(tools))
        context = ToolContext(context=None, tool_name="run_loop", tool_call_id="call-1",
                              tool_arguments=arguments)
        outputs = asyncio.run(tools["run_loop"].on_invoke_tool(context, arguments))
    if isinstance(outputs, str):  # a tool error, worded for the model
        raise SystemExit(outputs)
    print(outputs[0].text)
    out.mkdir(parents=True, exist_ok=True)
    saved = []
    for i, item in enumerate(o for o in outputs if isinstance(o, ToolOutputImage)):
        path = out / f"image-{i}.png"
        path.write_bytes(base64.b64decode(item.image_url.split(",", 1)[1]))
        saved.append(path)
    print(f"saved {len(saved)} image(s) in {out}")
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
