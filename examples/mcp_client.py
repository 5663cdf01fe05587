"""An MCP client session against ``genloop mcp`` over stdio: list the tools, run a loop while
printing its progress, save the best image.

    python examples/mcp_client.py [--home .genloop] [--out out/mcp]

Any MCP host (Claude Desktop, an IDE, an agent framework) does the same with the command
``genloop mcp --local HOME`` in its server configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import shutil
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters


def genloop_command() -> str:
    """The ``genloop`` script of this interpreter's environment (or the one on PATH)."""
    beside = Path(sys.executable).with_name("genloop")
    return str(beside) if beside.exists() else shutil.which("genloop") or "genloop"


async def session(home: str, out: Path, model: str, evaluator: str,
                  steps: int | None) -> tuple[list[str], Path]:
    server = StdioServerParameters(command=genloop_command(), args=[
        "mcp", "--local", home, "--threads", "2", "--models", model, "--evaluators", evaluator,
    ])

    async def progress(value: float, total: float | None, message: str | None) -> None:
        print(f"  progress {value:.2f}/{total}: {message}")

    async with Client(server) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        print("tools:", ", ".join(names))
        result = await client.call_tool("run_loop", {
            "prompt": "a large red circle in the centre, black background",
            "rounds": 2, "candidates": 2, "steps": steps,
        }, progress_callback=progress)
    if result.is_error:
        raise SystemExit(result.content[0].text)
    print(result.content[0].text)
    image = next(c for c in result.content if c.type == "image")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "best.png"
    path.write_bytes(base64.b64decode(image.data))
    print(f"saved {path}")
    return names, path


def main(home: str, out: Path, model: str, evaluator: str,
         steps: int | None) -> tuple[list[str], Path]:
    return asyncio.run(session(home, out, model, evaluator, steps))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".genloop")
    parser.add_argument("--out", default="out/mcp")
    parser.add_argument("--model", default="shapes")
    parser.add_argument("--evaluator", default="shapes-clip")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    main(args.home, Path(args.out), args.model, args.evaluator, args.steps)
