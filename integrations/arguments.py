"""The tools' argument models, built for one :class:`~.catalog.Catalog`.

Every field has a description and a default where one makes sense, names are enums of what the
catalog offers, numbers carry their limits: the JSON schema is the whole manual an LLM gets.
The models forbid unknown fields, so a misspelt argument is an error, not silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from .catalog import Catalog

_PROMPT = (str, Field(min_length=1, max_length=2000,
                      description="what the image should show, in plain words"))
_RUN_ID = (str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                      description="the run id a generate_images or run_loop call returned"))
_SEED = (int, Field(0, ge=0, le=2**31 - 1,
                    description="first random seed; the same arguments and seed give the same "
                    "images"))
_STEPS = (int | None, Field(None, ge=1, le=100,
                            description="denoising steps; null for the model's own default"))


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
    """One image an agent asks a paused loop to make next: drawn anew, or an edit of one."""

    prompt: str = _PROMPT[1]
    seed: int = _SEED[1]
    init_image: str | None = Field(None, max_length=200, description=(
        "artifact key of a candidate the paused run showed, to edit it (img2img) instead of "
        "drawing from noise; null to draw anew"))
    strength: float | None = Field(None, gt=0, le=1, description=(
        "with init_image: how far the edit departs from it (small keeps the layout, 1 is a "
        "fresh image); null for the model's default"))


class _EnoughImages(ToolArguments):
    @model_validator(mode="after")
    def _top_k_within_n(self) -> Any:
        if self.top_k > self.n:  # type: ignore[attr-defined]
            raise ValueError("top_k must not exceed n (you cannot keep more images than made)")
        return self


def field_schemas(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's JSON schema, self-contained: ``$ref`` to a nested model inlined, titles
    dropped (the field name says it), for adapters that take one schema per argument."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**inline(defs[node["$ref"].rsplit("/", 1)[-1]]), **inline(rest)}
        return {k: inline(v) for k, v in node.items() if k != "title"}

    return {name: inline(prop) for name, prop in schema["properties"].items()}


def _choice(names: tuple[str, ...], what: str) -> tuple[Any, Any]:
    return (Literal[names], Field(names[0], description=f"{what}; one of: {', '.join(names)}"))


def _wait(default: float, what: str) -> tuple[Any, Any]:
    return (float, Field(default, ge=0, le=600, description=(
        f"seconds to wait for {what}; if the run is not done by then, the tool returns its "
        "run id and status instead, and you call get_run to wait again")))


def _side(catalog: Catalog, which: str) -> tuple[Any, Any]:
    return (int | None, Field(None, ge=8, le=catalog.max_side, multiple_of=8, description=(
        f"image {which} in pixels, a multiple of 8; null for the model's own size")))


def argument_models(catalog: Catalog) -> dict[str, type[ToolArguments]]:
    """One argument model per tool name, with the catalog's names and limits."""
    image = {
        "model": _choice(catalog.models, "image model"),
        "evaluator": _choice(catalog.evaluators, "scorer that grades each image against the "
                                                 "prompt (scores are 0-100, higher is better)"),
        "seed": _SEED,
        "steps": _STEPS,
        "width": _side(catalog, "width"),
        "height": _side(catalog, "height"),
    }
    generate = create_model(
        "GenerateImagesArguments", __base__=_EnoughImages, __doc__="generate_images arguments",
        prompt=_PROMPT,
        n=(int, Field(4, ge=1, le=catalog.max_images,
                      description="how many images to generate and score")),
        top_k=(int, Field(1, ge=1, le=catalog.max_images,
                          description="how many of the best-scored images to return")),
        **image,
        wait_seconds=_wait(60, "the images"),
    )
    loop = create_model(
        "RunLoopArguments", __base__=ToolArguments, __doc__="run_loop arguments",
        prompt=_PROMPT,
        rounds=(int, Field(3, ge=1, le=catalog.max_rounds,
                           description="rounds of generate -> score -> refine")),
        candidates=(int, Field(4, ge=1, le=catalog.max_images,
                               description="images per round")),
        target=(float | None, Field(None, ge=0, le=100, description=(
            "stop early once an image scores at least this (0-100); null to run every round"))),
        refiner=_choice(catalog.refiners, "how each round picks the next round's images"),
        **image,
        wait_seconds=_wait(120, "the loop to finish"),
    )
    get_run = create_model(
        "GetRunArguments", __base__=ToolArguments, __doc__="get_run arguments",
        run_id=_RUN_ID, wait_seconds=_wait(30, "the run to finish"),
    )
    get_result = create_model(
        "GetResultArguments", __base__=ToolArguments, __doc__="get_result arguments",
        run_id=_RUN_ID,
        max_images=(int, Field(4, ge=1, le=catalog.max_images,
                               description="most images to return (the best first)")),
    )
    cancel = create_model(
        "CancelRunArguments", __base__=ToolArguments, __doc__="cancel_run arguments",
        run_id=_RUN_ID,
    )
    refine = create_model(
        "RefineRunArguments", __base__=ToolArguments, __doc__="refine_run arguments",
        run_id=_RUN_ID,
        node_id=(str | None, Field(None, max_length=200, description=(
            "the refine node you answer, as the paused run named it; null for the one "
            "waiting now"))),
        requests=(list[NextImage], Field(min_length=1, max_length=catalog.max_images,
                                         description=(
            "the next round's images, one entry each (at most the number the paused run "
            "asked for; extra ones are dropped)"))),
        wait_seconds=_wait(120, "the loop to finish or pause again"),
    )
    return {"generate_images": generate, "run_loop": loop, "get_run": get_run,
            "get_result": get_result, "cancel_run": cancel, "refine_run": refine}
