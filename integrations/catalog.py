"""What the tools may name: the models, evaluators and refiners an agent can choose from.

:meth:`Catalog.served` takes the names from what the back end serves (``client.schema()``);
an operator may narrow them further by building a ``Catalog`` by hand. The tools' JSON schemas
carry the names as enums: an LLM picks from a list instead of guessing, and a name outside it
is refused before anything is submitted. The first name of each list is the default the tools
use.

Only names a call can use are offered: an evaluator that needs what no tool argument supplies
(``hf-clip``'s model folder, ``aesthetic``'s head, a ``vlm-judge`` with no server configured) is
left out, unless the operator configures it in ``evaluator_options``, which the tools then pass
with every call that names it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from genloop.sdk import Loop, Named, SpecSchema

#: What every genloop install serves: the random-weight test model, the shipped shapes model,
#: their evaluators and the built-in refine strategies.
DEFAULT_MODELS = ("shapes", "tiny")
DEFAULT_EVALUATORS = ("shapes-clip", "clip")
DEFAULT_REFINERS = ("seed-search", "prompt-variants", "critic-edit", "draft", "prompt-history",
                    "agent")


class Catalog(BaseModel):
    """The names the tools offer, and the size limits of one tool call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[str, ...] = Field(DEFAULT_MODELS, min_length=1)
    evaluators: tuple[str, ...] = Field(DEFAULT_EVALUATORS, min_length=1)
    refiners: tuple[str, ...] = Field(DEFAULT_REFINERS, min_length=1)
    max_images: int = Field(16, ge=1, le=256, description="most images one generate call makes")
    max_rounds: int = Field(10, ge=1, le=50, description="most rounds one loop runs")
    max_side: int = Field(1024, ge=8, description="largest width or height, in pixels")
    evaluator_options: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "the operator's settings per evaluator, sent with every call naming it"))

    @field_validator("models", "evaluators", "refiners")
    @classmethod
    def _distinct(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(names)) != len(names) or not all(names):
            raise ValueError("names must be distinct and non-empty")
        return names

    @model_validator(mode="after")
    def _options_for_offered(self) -> Catalog:
        if stray := sorted(set(self.evaluator_options) - set(self.evaluators)):
            raise ValueError(f"evaluator_options name evaluators not offered: {stray}")
        return self

    @classmethod
    def served(cls, schema: SpecSchema, *,
               evaluator_options: dict[str, dict[str, Any]] | None = None,
               **limits: Any) -> Catalog:
        """The names ``schema`` (a back end's ``client.schema()``) serves that a call can use,
        each list led by the back end's default; an evaluator that needs something is offered
        once ``evaluator_options`` supply it. ``limits`` set the size limits."""
        s = schema.served
        options = evaluator_options or {}
        unusable = {n.name: missing for n in s.evaluators
                    if (missing := [k for k in n.needs if k not in options.get(n.name, {})])}
        if refused := sorted(set(options) & set(unusable)):
            name = refused[0]
            raise ValueError(f"evaluator {name!r} still needs {', '.join(unusable[name])}")
        usable = [n for n in s.evaluators if n.name not in unusable]
        loop_refiner = Loop.model_fields["refiner"].default
        return cls(models=_led_by(s.models, s.default_model),
                   evaluators=_led_by(usable, s.default_evaluator),
                   refiners=_led_by(s.refiners, loop_refiner),
                   evaluator_options=options, **limits)


def _led_by(names: list[Named], default: str | None) -> tuple[str, ...]:
    listed = [n.name for n in names]
    return tuple(sorted(listed, key=lambda n: n != default))
