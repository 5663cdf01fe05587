"""An MCP server over genloop (``pip install 'genloop[mcp]'``), built on the official ``mcp``
SDK's ``MCPServer``. ``genloop mcp`` runs it over stdio or streamable HTTP::

    genloop mcp --local .genloop                       # embedded workers, stdio
    genloop mcp --gateway https://gw --api-key KEY --transport streamable-http --port 8765

Tools are the operations of :class:`~genloop.integrations.GenloopTools`; each answers with text
and the images as MCP image content (PNG). While a call waits, the run's events go to the
client as progress notifications (nodes ended, denoising steps). Resources:
``genloop://runs/{run_id}/result`` (the run's result as JSON) and
``genloop://artifacts/{key}`` (an image's PNG bytes).
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import TextContent
from pydantic import WithJsonSchema

from genloop.sdk import GenloopError

from .arguments import field_schemas
from .errors import ToolCallError, from_genloop
from .progress import Progress
from .tools import GenloopTools, ToolSpec

INSTRUCTIONS = (
    "genloop generates images and grades them against the prompt (scores 0-100, higher is "
    "better). Use run_loop to improve an image over rounds, generate_images for a quick batch. "
    "A call that is not done within wait_seconds returns a run_id: call get_run with it."
)


def _parameters(spec: ToolSpec) -> list[inspect.Parameter]:
    """The tool's signature as MCPServer reads it: one keyword per field, whose JSON schema is
    our model's (names, enums, limits, descriptions). The values are left untyped (``Any``)
    there, so that genloop's own validation, with its readable messages, judges them."""
    schema = field_schemas(spec.arguments)
    params = []
    for name, field in spec.arguments.model_fields.items():
        prop = schema[name]
        default = inspect.Parameter.empty if field.is_required() else field.default
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[Any, WithJsonSchema(prop)]))
    return params


def _tool(tools: GenloopTools, spec: ToolSpec) -> Any:
    async def call(ctx: Context, **arguments: Any) -> list[Any]:
        async def report(p: Progress) -> None:
            await ctx.report_progress(p.progress, p.total, p.message)

        try:
            out = await tools.acall(spec.name, arguments, progress=report)
        except ToolCallError as exc:
            raise ToolError(str(exc)) from None
        return [TextContent(type="text", text=out.text),
                *(Image(data=image.png, format="png") for image in out.images)]

    call.__name__ = spec.name
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context),
         *_parameters(spec)])
    return call


def build_server(tools: GenloopTools, *, name: str = "genloop") -> MCPServer:
    """An MCP server offering ``tools`` and their runs' results and images as resources."""
    server: MCPServer = MCPServer(name, instructions=INSTRUCTIONS)
    for spec in tools.specs.values():
        server.add_tool(_tool(tools, spec), name=spec.name, description=spec.description,
                        structured_output=False)

    @server.resource("genloop://runs/{run_id}/result", mime_type="application/json",
                     description="a run's result: every node's outputs, scores and failures")
    async def run_result(run_id: str) -> str:
        try:
            return (await (await tools.aclient.get(run_id)).result()).model_dump_json()
        except GenloopError as exc:
            raise ToolError(str(from_genloop("resource", exc))) from None

    @server.resource("genloop://artifacts/{key}", mime_type="image/png",
                     description="an image a run made, by artifact key (PNG)")
    async def artifact(key: str) -> bytes:
        try:
            return await tools.aclient.read_artifact(key)
        except GenloopError as exc:
            raise ToolError(str(from_genloop("resource", exc))) from None

    return server
