"""Typed op inputs: an op gets each input item as the model its producing op declared
(``@op(..., output=Model)``), or as the raw JSON item when the producer declared none.

A stored result names its producer's output model by import path (``module:QualName``), so the
answer does not depend on which op modules the consuming worker happened to import: a pool whose
workers import different modules, or a runtime given a registry without the producer, types the
items the same way as the process that ran the producer. Only workers write results, so the
path is trusted code's, like an ``--import``.
"""

from __future__ import annotations

import importlib

from pydantic import BaseModel

from genloop.sdk.errors import Permanent

from ..stores.records import ResultRecord
from .registry import OpRegistry

_resolved: dict[str, type[BaseModel]] = {}


def model_path(model: type[BaseModel] | None) -> str | None:
    """What a result records of its producer's output model."""
    return None if model is None else f"{model.__module__}:{model.__qualname__}"


def output_model(registry: OpRegistry, result: ResultRecord) -> type[BaseModel] | None:
    """The model of ``result``'s items: its op's declared output (from ``registry`` if the op is
    registered here, else by the path the result recorded); ``None`` for raw items."""
    spec = registry.get(result.op)
    if spec is not None and spec.output is not None:
        return spec.output
    if result.output is None:
        return None
    model = _resolved.get(result.output)
    if model is None:
        model = _resolved[result.output] = _import(result.output, result.op)
    return model


def _import(path: str, op: str) -> type[BaseModel]:
    module, _, qualname = path.partition(":")
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise Permanent(f"the items of op {op!r} are {path}, which this worker cannot import "
                        f"({exc}): start it with --import for the module of op {op!r}") from exc
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise Permanent(f"the items of op {op!r} are {path}, which is not a pydantic model")
    return found
