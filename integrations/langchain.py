"""LangChain tools over genloop (``pip install 'genloop[langchain]'``)::

    from genloop.integrations.langchain import GenloopToolkit

    tools = GenloopToolkit.from_client(Client.local()).get_tools()
    agent = create_agent(model, tools)        # or model.bind_tools(tools)

Each tool answers ``content_and_artifact``: the text is what the model reads (scores, run id,
what to call next); the artifact is the :class:`~genloop.integrations.ToolOutput` with the PNG
images and the run id, for the application around the agent. ``ainvoke`` is native asyncio over
the toolkit's ``AsyncClient``. Bad arguments and failed calls come back as error tool messages
that say what to change, not as exceptions.
"""

from __future__ import annotations

from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import BaseTool, BaseToolkit, ToolException
from pydantic import ConfigDict, Field, ValidationError

from genloop.sdk import AsyncClient, Client

from .catalog import Catalog
from .errors import ToolCallError, invalid_arguments
from .outcome import ToolOutput
from .tools import GenloopTools


class GenloopTool(BaseTool):
    """One genloop operation as a LangChain tool; a subclass per operation names which."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    operation: ClassVar[str]
    tools: GenloopTools = Field(exclude=True, description="the tool surface this tool calls")
    response_format: str = "content_and_artifact"  # type: ignore[assignment]
    handle_tool_error: bool = True

    def __init__(self, tools: GenloopTools, **kwargs: Any) -> None:
        spec = tools.specs[self.operation]
        kwargs.setdefault("handle_validation_error", self._explain)
        super().__init__(tools=tools, name=spec.name, description=spec.description,
                         args_schema=spec.arguments, **kwargs)

    def _explain(self, exc: ValidationError) -> str:
        return str(invalid_arguments(self.operation, exc))

    def _run(self, run_manager: CallbackManagerForToolRun | None = None,
             **arguments: Any) -> tuple[str, ToolOutput]:
        try:
            out = self.tools.call(self.operation, arguments)
        except ToolCallError as exc:
            raise ToolException(str(exc)) from None
        return out.text, out

    async def _arun(self, run_manager: AsyncCallbackManagerForToolRun | None = None,
                    **arguments: Any) -> tuple[str, ToolOutput]:
        try:
            out = await self.tools.acall(self.operation, arguments)
        except ToolCallError as exc:
            raise ToolException(str(exc)) from None
        return out.text, out


class GenerateImagesTool(GenloopTool):
    operation = "generate_images"


class RunLoopTool(GenloopTool):
    operation = "run_loop"


class GetRunTool(GenloopTool):
    operation = "get_run"


class GetResultTool(GenloopTool):
    operation = "get_result"


class CancelRunTool(GenloopTool):
    operation = "cancel_run"


class RefineRunTool(GenloopTool):
    operation = "refine_run"


TOOL_CLASSES: tuple[type[GenloopTool], ...] = (
    GenerateImagesTool, RunLoopTool, GetRunTool, GetResultTool, CancelRunTool, RefineRunTool,
)


class GenloopToolkit(BaseToolkit):
    """Every genloop tool over one :class:`~genloop.integrations.GenloopTools`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tools: GenloopTools

    @classmethod
    def from_client(cls, client: Client | AsyncClient, *, aclient: AsyncClient | None = None,
                    catalog: Catalog | None = None) -> GenloopToolkit:
        return cls(tools=GenloopTools(client, aclient=aclient, catalog=catalog))

    def get_tools(self) -> list[BaseTool]:
        return [cls(self.tools) for cls in TOOL_CLASSES]
