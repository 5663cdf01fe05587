"""The spec schema a back end publishes: Graph and Loop JSON Schema, narrowed to what it serves.

An agent that writes specs as JSON can constrain its output to :attr:`SpecSchema.graph` or
:attr:`SpecSchema.loop`: ``model``, ``evaluator``, ``refiner`` (``strategy``) and ``op`` are
enums of the names this back end actually serves, each name's description is in the field's
description, and a graph node's ``params`` are the schema of its op's params (one ``anyOf``
variant per op). ``client.schema()``, ``GET /v1/schema`` and ``genloop schema`` return it.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, Field

from .graph import Graph
from .loop import RECIPE_FIELDS, Loop
from .ops import BUILTIN_PARAMS

JsonSchema = dict[str, Any]


class Named(BaseModel):
    """A name a spec may use, and what it is."""

    name: str
    description: str = ""
    needs: list[str] = Field(default_factory=list, description=(
        "what must be supplied before the name works on its own: options a spec must give "
        "(an operator-side path, weights) or environment variables the operator has not set"))


class Served(BaseModel):
    """What a back end serves: the names a spec may use and the defaults it fills in."""

    models: list[Named] = Field(description="text-to-image models (`model`)")
    evaluators: list[Named] = Field(description="scorers (`evaluator`)")
    refiners: list[Named] = Field(description="refine strategies (Loop `refiner`, refine "
                                  "`strategy`)")
    ops: list[Named] = Field(description="graph node ops (`op`)")
    default_model: str | None = Field(None, description="used where `model` is omitted")
    default_evaluator: str | None = Field(None, description="used where `evaluator` is omitted")
    recipes: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "per model, the settings of the best loop measured on it: a Loop that sets none of "
        "evaluator, evaluator_options, refiner, candidates, rounds, target, keep, steps, "
        "guidance, budget, draft_candidates and draft_steps runs with these"))
    cache_modes: dict[str, list[str]] = Field(default_factory=dict, description=(
        "per model whose architecture the back end knows, the step cache modes it runs "
        "(`cache` of a generate node or Loop); another mode is refused"))


class SpecSchema(BaseModel):
    """JSON Schema of the specs a back end accepts, with the names it serves."""

    served: Served
    graph: JsonSchema = Field(description="JSON Schema of a Graph, names narrowed to enums")
    loop: JsonSchema = Field(description="JSON Schema of a Loop, names narrowed to enums")


def _narrow(prop: JsonSchema, names: list[Named], default: str | None,
            nullable: bool) -> None:
    """Make ``prop`` (a property's schema) an enum of ``names``, described name by name."""
    listed = "; ".join(f"'{n.name}': {n.description}" if n.description else f"'{n.name}'"
                       for n in names)
    for key in ("anyOf", "type", "pattern", "minLength"):
        prop.pop(key, None)
    prop["enum"] = [n.name for n in names] + ([None] if nullable else [])
    extra = f" Available here: {listed}." if names else " None available here."
    if default is not None:
        extra += f" Default here: '{default}'."
    prop["description"] = prop.get("description", "") + extra


def _params_schema(op: str, model: type[BaseModel], served: Served) -> JsonSchema:
    schema = model.model_json_schema()
    props = schema.get("properties", {})
    if op == "generate" and "model" in props:
        _narrow(props["model"], served.models, served.default_model, nullable=True)
    if op == "score" and "evaluator" in props:
        _narrow(props["evaluator"], served.evaluators, served.default_evaluator, nullable=True)
    if op == "refine" and "strategy" in props:
        _narrow(props["strategy"], served.refiners, None, nullable=False)
    return schema


def graph_schema(served: Served, params: dict[str, type[BaseModel]] | None = None) -> JsonSchema:
    """Graph's schema with one node variant per served op; ``params`` maps op names to their
    params models (built-ins are known; an op without one gets a free-form object)."""
    params = {**BUILTIN_PARAMS, **(params or {})}
    schema = Graph.model_json_schema()
    defs = schema.setdefault("$defs", {})
    node = defs.pop("Node")
    variants = []
    for op in served.ops:
        variant = copy.deepcopy(node)
        variant["title"] = f"Node ({op.name})"
        variant["properties"]["op"] = {"const": op.name, "description": op.description
                                       or node["properties"]["op"]["description"]}
        if op.name in params:
            p = _params_schema(op.name, params[op.name], served)
            defs.update(p.pop("$defs", {}))
            defs[f"params_{op.name}"] = p
            variant["properties"]["params"] = {
                "$ref": f"#/$defs/params_{op.name}",
                "description": node["properties"]["params"]["description"],
            }
        variant["required"] = sorted({*variant.get("required", []), "op"})
        defs[f"node_{op.name}"] = variant
        variants.append({"$ref": f"#/$defs/node_{op.name}"})
    schema["properties"]["nodes"]["items"] = {"anyOf": variants}
    return schema


def loop_schema(served: Served) -> JsonSchema:
    schema = Loop.model_json_schema()
    props = schema["properties"]
    _narrow(props["model"], served.models, served.default_model, nullable=True)
    _narrow(props["evaluator"], served.evaluators, served.default_evaluator, nullable=True)
    _narrow(props["refiner"], served.refiners, None, nullable=False)
    for model, recipe in sorted(served.recipes.items()):
        settings = ", ".join(f"{k}={v!r}" for k, v in recipe.items())
        schema["description"] += (
            f" On model '{model}', a loop that sets none of {', '.join(sorted(RECIPE_FIELDS))} "
            f"runs the best loop measured there: {settings}.")
    return schema


def fill_defaults(spec: Graph | Loop, served: Served) -> Graph | Loop:
    """``spec`` with the back end's default model and evaluator where it names none, and a Loop
    with its model's recipe (:meth:`Loop.with_recipe`), so the stored spec says what ran (and
    result keys carry the model's identity)."""
    if isinstance(spec, Loop):
        spec = spec.with_recipe(served.recipes.get(spec.model or served.default_model or ""))
        return spec.model_copy(update={
            "model": spec.model or served.default_model,
            "evaluator": spec.evaluator or served.default_evaluator,
        })
    fills = {"generate": ("model", served.default_model),
             "score": ("evaluator", served.default_evaluator)}
    nodes = []
    for node in spec.nodes:
        field, default = fills.get(node.op, (None, None))
        if field and default and node.params.get(field) is None:
            node = node.model_copy(update={"params": {**node.params, field: default}})
        nodes.append(node)
    return spec.model_copy(update={"nodes": nodes})


def spec_schema(served: Served, params: dict[str, type[BaseModel]] | None = None) -> SpecSchema:
    """The published schema for a back end that serves ``served``."""
    return SpecSchema(served=served, graph=graph_schema(served, params),
                      loop=loop_schema(served))
