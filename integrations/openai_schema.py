"""OpenAI-style function tools without any framework: the schemas and a dispatcher.

:func:`openai_tools` gives the ``{"type": "function", "function": {...}}`` entries the Chat
Completions and Responses APIs (and everything that copies their format) accept, in strict
mode: every property is listed as required, a property with a default also accepts ``null``
(meaning "use the default", which the description states), and no ``default`` keyword is left,
since strict mode does not allow it. :func:`dispatch` executes a call given its name and JSON
arguments and never raises: a failure comes back as a ``ToolOutput`` with ``error`` set, whose
text the model can read.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel

from .arguments import argument_models, field_schemas
from .catalog import Catalog
from .errors import ToolCallError
from .outcome import ToolOutput
from .tools import DESCRIPTIONS, GenloopTools


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema in the strict subset (see the module docstring); nested models
    (a list of objects) are made strict the same way. The tool's description says what the
    arguments are for, so the top level has none of its own."""
    return _strict_object(field_schemas(model), "")


def _strict_object(fields: dict[str, Any], description: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, prop in fields.items():
        prop = _strict(prop)
        if "default" in prop:
            default = prop.pop("default")
            if default is not None:  # a nullable field's description already says what null is
                # A name unquoted: quotes inside a JSON string cost a model two escapes each.
                shown = default if isinstance(default, str) else json.dumps(default)
                said = f"null means {shown}"
                text = prop.get("description")
                prop = {**_nullable(prop), "description": f"{text}; {said}" if text else said}
        properties[name] = prop
    return {
        "type": "object",
        **({"description": description} if description else {}),
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _strict(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's schema with every object in it strict (a list of nested models)."""
    prop = copy.deepcopy(prop)
    if "properties" in prop:
        extra = {k: v for k, v in prop.items()
                 if k not in ("properties", "required", "additionalProperties", "type")}
        return {**_strict_object(prop["properties"], prop.get("description", "")), **extra}
    if "items" in prop:
        prop["items"] = _strict(prop["items"])
    if "anyOf" in prop:
        branches = [_strict(p) for p in prop.pop("anyOf")]
        if len(branches) == 2 and branches[1] == {"type": "null"}:  # pydantic's X | None
            prop.setdefault("description", "null means the default")
            return _nullable({**branches[0], **prop})
        prop["anyOf"] = branches
    return prop


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """``prop`` also accepting null, in the fewest tokens: a type list or null in the enum
    (``anyOf`` only for what has neither)."""
    if isinstance(prop.get("type"), str):
        return {**prop, "type": [prop["type"], "null"]}
    if "enum" in prop:
        return {**prop, "enum": [*prop["enum"], None]}
    rest = {k: v for k, v in prop.items() if k != "description"}
    described = {"description": prop["description"]} if "description" in prop else {}
    return {"anyOf": [rest, {"type": "null"}], **described}


def openai_tools(catalog: Catalog | None = None) -> list[dict[str, Any]]:
    """The tools as OpenAI function definitions (strict JSON schemas)."""
    models = argument_models(catalog or Catalog())
    return [
        {"type": "function", "function": {
            "name": name, "description": DESCRIPTIONS[name],
            "parameters": strict_schema(model), "strict": True,
        }}
        for name, model in models.items()
    ]


def _decode(name: str, arguments: str | dict[str, Any]) -> dict[str, Any] | ToolOutput:
    if isinstance(arguments, dict):
        return arguments
    try:
        decoded = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return failed(ToolCallError(name, f"The arguments for {name} are not valid JSON ({exc}); "
                                          "send a JSON object."))
    return decoded


def failed(exc: ToolCallError) -> ToolOutput:
    return ToolOutput(text=str(exc), error=True, done=True)  # nothing to wait for


async def adispatch(tools: GenloopTools, name: str, arguments: str | dict[str, Any]) -> ToolOutput:
    """Execute tool call ``name`` with its JSON ``arguments``; errors come back as output."""
    decoded = _decode(name, arguments)
    if isinstance(decoded, ToolOutput):
        return decoded
    try:
        return await tools.acall(name, decoded)
    except ToolCallError as exc:
        return failed(exc)


def dispatch(tools: GenloopTools, name: str, arguments: str | dict[str, Any]) -> ToolOutput:
    """:func:`adispatch` from sync code (needs the tools to have a sync ``Client``)."""
    decoded = _decode(name, arguments)
    if isinstance(decoded, ToolOutput):
        return decoded
    try:
        return tools.call(name, decoded)
    except ToolCallError as exc:
        return failed(exc)
