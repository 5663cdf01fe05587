"""What the tools may name: the models, evaluators and refiners an agent can choose from.

The back ends do not (yet) publish what they serve, so the operator says it once, here, and the
tools' JSON schemas carry the names as enums: an LLM picks from a list instead of guessing, and
a name outside it is refused before anything is submitted. The first name of each list is the
default the tools use.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: What every genloop install serves: the random-weight test model, the shipped shapes model,
#: their evaluators and the built-in refine strategies.
DEFAULT_MODELS = ("shapes", "tiny")
DEFAULT_EVALUATORS = ("shapes-clip", "clip")
DEFAULT_REFINERS = ("seed-search", "prompt-variants")


class Catalog(BaseModel):
    """The names the tools offer, and the size limits of one tool call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[str, ...] = Field(DEFAULT_MODELS, min_length=1)
    evaluators: tuple[str, ...] = Field(DEFAULT_EVALUATORS, min_length=1)
    refiners: tuple[str, ...] = Field(DEFAULT_REFINERS, min_length=1)
    max_images: int = Field(16, ge=1, le=256, description="most images one generate call makes")
    max_rounds: int = Field(10, ge=1, le=50, description="most rounds one loop runs")
    max_side: int = Field(1024, ge=8, description="largest width or height, in pixels")

    @field_validator("models", "evaluators", "refiners")
    @classmethod
    def _distinct(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(names)) != len(names) or not all(names):
            raise ValueError("names must be distinct and non-empty")
        return names
