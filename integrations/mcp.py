"""An MCP server over genloop (``pip install 'genloop[mcp]'``), built on the official ``mcp``
SDK's ``MCPServer``. ``genloop mcp`` runs it over stdio or streamable HTTP (at ``/mcp``)::

    genloop mcp --local .genloop                       # embedded workers, stdio
    genloop mcp --gateway https://gw --api-key KEY --transport streamable-http --port 8765

Tools are the operations of :class:`~genloop.integrations.GenloopTools`. Each answers with text,
then each image (PNG) after a line naming its label and artifact key, and with
``structuredContent``: the :class:`~.result.ToolResult` its ``outputSchema`` describes. While a
call waits, the run's events go to the client as progress notifications. Resources:
``genloop://runs/{run_id}/result`` (the run's result as JSON, embeddings left out unless
``?embeddings=true``) and ``genloop://artifacts/{key}`` (an image's PNG bytes).
"""

from __future__ import annotations

import base64
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, ImageContent, TextContent

from genloop.sdk import GenloopError, NotFound

from .arguments import input_schema
from .errors import ToolCallError
from .outcome import ToolOutput
from .progress import Progress
from .result import compact_result, output_schema
from .tools import GenloopTools, ToolSpec

INSTRUCTIONS = (
    "genloop generates images and grades them against the prompt (scores 0-100, higher is "
    "better). Use run_loop to improve an image over rounds, generate_images for a quick batch. "
    "A call that is not done within wait_seconds returns a run_id: call get_run with it."
)


class _Unvalidated(FuncMetadata):
    """Hands a tool call's arguments to the tool as they came.

    MCPServer validates arguments against a model it builds from the function's signature
    before the tool runs: a missing field then fails with pydantic's raw message, and an unknown
    field is dropped without a word. genloop's tools validate themselves (every problem named
    field by field, unknown fields refused), so this passes the whole object through."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {"arguments": dict(arguments_to_validate)}


def content(out: ToolOutput) -> list[TextContent | ImageContent]:
    """The text, then each image after a line that names it (label and artifact key)."""
    blocks: list[TextContent | ImageContent] = [TextContent(type="text", text=out.text)]
    for image in out.images:
        blocks.append(TextContent(type="text", text=f"{image.label}: {image.artifact}"))
        blocks.append(ImageContent(type="image", mime_type="image/png",
                                   data=base64.b64encode(image.png).decode()))
    return blocks


def _tool(tools: GenloopTools, spec: ToolSpec) -> Tool:
    async def call(ctx: Context, arguments: dict[str, Any]) -> CallToolResult:
        async def report(p: Progress) -> None:
            await ctx.report_progress(p.progress, p.total, p.message)

        try:
            out = await tools.acall(spec.name, arguments, progress=report)
        except ToolCallError as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))],
                                  is_error=True)
        return CallToolResult(content=content(out),
                              structured_content=out.structured().model_dump(mode="json"))

    return Tool(fn=call, name=spec.name, description=spec.description,
                parameters=input_schema(spec.arguments), is_async=True, context_kwarg="ctx",
                fn_metadata=_Unvalidated(arg_model=ArgModelBase, output_schema=output_schema()))


def _resource_error(what: str, exc: GenloopError) -> ResourceError:
    if isinstance(exc, NotFound):
        return ResourceNotFoundError(f"{exc}. {what}")
    return ResourceError(f"{exc}. {what}")


def build_server(tools: GenloopTools, *, name: str = "genloop") -> MCPServer:
    """An MCP server offering ``tools`` and their runs' results and images as resources."""
    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS,
                                  tools=[_tool(tools, spec) for spec in tools.specs.values()])

    @server.resource("genloop://runs/{run_id}/result{?embeddings}",
                     mime_type="application/json",
                     description="a run's result: every node's outputs, scores and failures "
                     "(image embeddings only with ?embeddings=true)")
    async def run_result(run_id: str, embeddings: str = "false") -> str:
        try:
            result = await (await tools.aclient.get(run_id)).result()
        except GenloopError as exc:
            raise _resource_error("Use a run_id a tool call returned.", exc) from None
        if embeddings.lower() not in ("true", "1", "yes"):
            result = compact_result(result)
        return result.model_dump_json()

    @server.resource("genloop://artifacts/{key}", mime_type="image/png",
                     description="an image a run made, by artifact key (PNG)")
    async def artifact(key: str) -> bytes:
        try:
            return await tools.aclient.read_artifact(key)
        except GenloopError as exc:
            raise _resource_error("Use an artifact key a tool call or a run's result "
                                  "named.", exc) from None

    return server
