"""The tools' argument models, built for one :class:`~.catalog.Catalog`.

Every field has a description and a default where one makes sense, names are enums of what the
catalog offers, numbers carry their limits: the JSON schema is the whole manual an LLM gets.
The models forbid unknown fields, so a misspelt argument is an error, not silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from .catalog import Catalog

_PROMPT = (str, Field(min_length=1, max_length=2000, description="what the image should show"))
_RUN_ID = (str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                      description="from generate_images or run_loop"))
_SEED = (int, Field(0, ge=0, le=2**31 - 1))
_LABEL: tuple[Any, Any] = (str | None, Field(None, min_length=1, max_length=200,
                            description="a tag to find the run again (get_run label)"))
_STEPS = (int | None, Field(None, ge=1, le=100, description="default: the model's"))


class ToolArguments(BaseModel):
    """Base of every tool's arguments: unknown fields are refused.

    ``None`` stands for "the default" on fields that do not accept null themselves: strict
    JSON schemas (OpenAI's) make every field required, so models send null for "unset".
    """

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items()
                if not (v is None and k in fields and fields[k].default is not None)}


class NextImage(ToolArguments):
    """One image of the next round: drawn anew, or an edit of a shown candidate."""

    prompt: str = _PROMPT[1]
    seed: int = _SEED[1]
    init_image: str | None = Field(None, max_length=200, description=(
        "artifact key of a shown candidate to edit instead of drawing anew"))
    strength: float | None = Field(None, gt=0, le=1, description=(
        "how far an edit departs from init_image: small keeps its layout, 1 redraws"))


class _RunOrLabel(ToolArguments):
    @model_validator(mode="after")
    def _one_of(self) -> Any:
        if (self.run_id is None) == (self.label is None):  # type: ignore[attr-defined]
            raise ValueError("give run_id, or label to find your newest run with it")
        return self


class _EnoughImages(ToolArguments):
    @model_validator(mode="after")
    def _top_k_within_n(self) -> Any:
        if self.top_k > self.n:  # type: ignore[attr-defined]
            raise ValueError("top_k must not exceed n (you cannot keep more images than made)")
        return self


#: Keywords left out of the published schemas: string lengths and patterns (a model never
#: comes near them, and validation still applies them and names them in its message).
_UNPUBLISHED = frozenset({"title", "minLength", "maxLength", "pattern"})
#: A bound this large (a seed's) tells a model nothing.
_NO_BOUND = 2**31 - 1


def field_schemas(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's JSON schema, self-contained and lean: ``$ref`` to a nested model inlined,
    no titles (the field name says it), no ``type`` beside an ``enum``, none of
    :data:`_UNPUBLISHED`; for adapters that take one schema per argument."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})

    def inline(node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**inline(defs[node["$ref"].rsplit("/", 1)[-1]]), **inline(rest)}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _UNPUBLISHED or (key == "maximum" and value >= _NO_BOUND):
                continue
            if key == "properties":
                value = {name: inline(prop) for name, prop in value.items()}
            elif key == "items":
                value = inline(value)
            elif key == "anyOf":
                value = [inline(branch) for branch in value]
            out[key] = value
        if "const" in out:  # a one-name catalog's Literal: an enum like any other
            out["enum"] = [out.pop("const")]
        if "enum" in out:
            out.pop("type", None)
        return out

    return {name: inline(prop) for name, prop in schema["properties"].items()}


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s schema as a tool's input schema (MCP's ``inputSchema``): fields inlined and
    untitled, and an optional field without a default shown as its type alone, since leaving
    it out means the default (null, which strict formats need, is still accepted)."""
    fields = {name: _without_null(prop) for name, prop in field_schemas(model).items()}
    return {"type": "object", "properties": fields,
            "required": [n for n, f in model.model_fields.items() if f.is_required()],
            "additionalProperties": False}


def _without_null(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_null(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _without_null(v) for k, v in node.items()}
    branches = [b for b in node.get("anyOf", ()) if b != {"type": "null"}]
    if len(branches) == 1 and len(node["anyOf"]) == 2:
        rest = {k: v for k, v in node.items()
                if k != "anyOf" and not (k == "default" and v is None)}
        return {**branches[0], **rest}
    return node


def _choice(names: tuple[str, ...], what: str) -> tuple[Any, Any]:
    """An enum of ``names`` (the schema lists them; the description does not repeat them)."""
    return (Literal[names], Field(names[0], description=what))


def _wait(default: float) -> tuple[Any, Any]:
    return (float, Field(default, ge=0, le=600, description=(
        "seconds to wait before returning with done false")))


def _side(catalog: Catalog) -> tuple[Any, Any]:
    """Pixels; left out, the model's own size (its bounds say the rest)."""
    return (int | None, Field(None, ge=8, le=catalog.max_side, multiple_of=8))


def argument_models(catalog: Catalog) -> dict[str, type[ToolArguments]]:
    """One argument model per tool name, with the catalog's names and limits."""
    image: dict[str, Any] = {
        "model": _choice(catalog.models, "image model"),
        "evaluator": _choice(catalog.evaluators, "scorer"),
        "seed": _SEED,
        "steps": _STEPS,
        "width": _side(catalog),
        "height": _side(catalog),
    }
    generate = create_model(
        "GenerateImagesArguments", __base__=_EnoughImages, __doc__="generate_images arguments",
        prompt=_PROMPT,
        n=(int, Field(4, ge=1, le=catalog.max_images, description="images to make")),
        top_k=(int, Field(1, ge=1, le=catalog.max_images, description="best images to return")),
        **image,
        label=_LABEL,
        wait_seconds=_wait(60),
    )
    loop = create_model(
        "RunLoopArguments", __base__=ToolArguments, __doc__="run_loop arguments",
        prompt=_PROMPT,
        rounds=(int, Field(3, ge=1, le=catalog.max_rounds)),
        candidates=(int, Field(4, ge=1, le=catalog.max_images, description="images per round")),
        target=(float | None, Field(None, ge=0, le=100, description=(
            "stop once a score reaches this"))),
        refiner=_choice(catalog.refiners, "picks each next round; 'agent': you do (refine_run)"),
        **image,
        label=_LABEL,
        wait_seconds=_wait(120),
    )
    get_run = create_model(
        "GetRunArguments", __base__=_RunOrLabel, __doc__="get_run arguments",
        run_id=(str | None, Field(None, min_length=1, max_length=64,
                                  pattern=r"^[A-Za-z0-9_-]+$",
                                  description="from generate_images or run_loop")),
        label=(str | None, Field(None, min_length=1, max_length=200,
                                 description="or: your newest run with this label")),
        wait_seconds=_wait(30),
    )
    get_result = create_model(
        "GetResultArguments", __base__=ToolArguments, __doc__="get_result arguments",
        run_id=_RUN_ID,
        max_images=(int, Field(4, ge=1, le=catalog.max_images, description="most images to "
                               "return, best first")),
    )
    cancel = create_model(
        "CancelRunArguments", __base__=ToolArguments, __doc__="cancel_run arguments",
        run_id=_RUN_ID,
    )
    refine = create_model(
        "RefineRunArguments", __base__=ToolArguments, __doc__="refine_run arguments",
        run_id=_RUN_ID,
        node_id=(str | None, Field(None, max_length=200, description=(
            "refine.node_id of the pause; default: the one waiting now"))),
        requests=(list[NextImage], Field(min_length=1, max_length=catalog.max_images,
                                         description=(
            "the next round's images (up to refine.candidates)"))),
        wait_seconds=_wait(120),
    )
    return {"generate_images": generate, "run_loop": loop, "get_run": get_run,
            "get_result": get_result, "cancel_run": cancel, "refine_run": refine}
