"""genloop as tools for agents: one tool surface, an adapter per agent framework.

The core here needs nothing beyond the SDK: :class:`GenloopTools` (the operations, over any
client), :func:`openai_tools` and :func:`dispatch` (OpenAI-style function calling for any
framework that speaks it). Each framework's adapter is its own module, imported only when used,
and needs its extra:

- ``genloop.integrations.langchain`` (``pip install 'genloop[langchain]'``): LangChain tools;
- ``genloop.integrations.mcp`` (``genloop[mcp]``): an MCP server (``genloop mcp``);
- ``genloop.integrations.openai_agents`` (``genloop[openai-agents]``): OpenAI Agents tools.
"""

from __future__ import annotations

from .arguments import ToolArguments, argument_models
from .catalog import Catalog
from .errors import ToolCallError
from .openai_schema import adispatch, dispatch, openai_tools, strict_schema
from .outcome import ToolImage, ToolOutput
from .progress import Progress, ProgressSink
from .result import ImageRef, Pause, PauseCandidate, RoundBest, ToolResult
from .tools import DESCRIPTIONS, GenloopTools, ToolSpec

__all__ = [
    "DESCRIPTIONS",
    "Catalog",
    "GenloopTools",
    "ImageRef",
    "Pause",
    "PauseCandidate",
    "Progress",
    "ProgressSink",
    "RoundBest",
    "ToolArguments",
    "ToolCallError",
    "ToolImage",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "adispatch",
    "argument_models",
    "dispatch",
    "openai_tools",
    "strict_schema",
]


if __name__ != "genloop.integrations":  # imported as a bare `integrations` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
