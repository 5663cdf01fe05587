"""Tool errors: what went wrong, said so that the model calling the tool can fix its call.

Every failure of a tool call becomes a :class:`ToolCallError` whose message is meant for an LLM:
the field, the value, what is allowed, what to do. Adapters hand it to their framework as its
own kind of tool error (LangChain ``ToolException``, an MCP error result, an OpenAI tool output),
never as a stack trace.
"""

from __future__ import annotations

from pydantic import ValidationError

from genloop.sdk import (
    ClientError,
    GenloopError,
    GraphError,
    NotFound,
    RefineConflict,
    TransportError,
)
from genloop.sdk.errors import clip, clip_quotes


class ToolCallError(GenloopError, ValueError):
    """A tool call that could not be carried out; the message says why and how to fix it."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(clip_quotes(message))  # a caller's long value is quoted only in part
        self.tool = tool


def invalid_arguments(tool: str, exc: ValidationError) -> ToolCallError:
    """Every problem of the arguments at once, each naming its field and what it accepts."""
    lines = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err["loc"]) or "arguments"
        got = "" if err["type"] == "missing" else f" (got {clip(repr(err['input']))})"
        lines.append(f"- {field}: {err['msg']}{got}")
    return ToolCallError(tool, f"Invalid arguments for {tool}:\n" + "\n".join(lines)
                         + f"\nNothing was started. Fix these and call {tool} again.")


def from_genloop(tool: str, exc: GenloopError) -> ToolCallError:
    """A genloop error raised while calling the back end, as a tool error."""
    if isinstance(exc, ToolCallError):
        return exc
    if isinstance(exc, GraphError):
        problems = "\n".join(f"- {p}" for p in exc.problems)
        return ToolCallError(tool, f"genloop refused the request:\n{problems}\n"
                                   "Nothing was started. Change the arguments and try again.")
    if isinstance(exc, NotFound):
        return ToolCallError(tool, f"{exc}. Check the run_id: it must be one that "
                                   "generate_images or run_loop returned.")
    if isinstance(exc, RefineConflict):
        return ToolCallError(tool, f"{exc}. Nothing was changed: the run is not waiting for "
                                   "this answer. Call get_run to see where it stands.")
    if isinstance(exc, TransportError):
        return ToolCallError(tool, f"The genloop back end could not be reached ({exc}). It may "
                                   "be down or restarting; try again in a minute.")
    if isinstance(exc, ClientError):
        return ToolCallError(tool, f"The genloop back end refused the call: {exc}")
    return ToolCallError(tool, f"{type(exc).__name__}: {exc}")
