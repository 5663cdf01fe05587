"""The campaign spec: one file that says which variants to make, in which formats, on what budget.

A campaign is the product of its axes (``products x scenes x audiences ...``): each combination is
a *variant*, whose prompt is ``template`` filled with the variant's values and which runs as one
:class:`~genloop.sdk.Loop`. Validation collects every problem it can find and reports them together,
each with the field it concerns, so a spec is fixed in one pass, and nothing is submitted for an
invalid spec.
"""

from __future__ import annotations

import itertools
import math
import string
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from genloop.sdk import GenloopError, Loop, Priority
from genloop.sdk.ops import Reuse

#: Placement formats most ad platforms take, as (name, width, height).
STANDARD_FORMATS = (("1:1", 1080, 1080), ("4:5", 1080, 1350), ("9:16", 1080, 1920),
                    ("1.91:1", 1200, 628))
#: Beyond this aspect ratio (either way) a crop keeps under a third of the picture and padding
#: would dominate it, so such a format is refused rather than made badly.
MAX_ASPECT = 3.0
#: The most variants one campaign may have. Past it a spec is refused at once, with its count,
#: before anything is planned: a runner that enumerated 10^6 variants spent minutes and hundreds
#: of MB on rows the budget then skipped. Split a bigger campaign into several.
MAX_VARIANTS = 100_000


class CampaignSpecError(GenloopError):
    """The spec is invalid; ``problems`` lists every one as ``"field: what is wrong"``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid campaign spec:\n" + "\n".join(f"  - {p}" for p in problems))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FormatSpec(_Model):
    """One placement: the finished creative's pixel size. Made from the variant's best image by
    cropping around the subject (or padding) to this aspect ratio, then scaling; never stretched
    (or drawn again at this size: see :class:`FormatGeneration`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$", description="e.g. '4:5'")
    width: int = Field(ge=16, le=4096)
    height: int = Field(ge=16, le=4096)

    @property
    def aspect(self) -> float:
        return self.width / self.height

    @property
    def slug(self) -> str:
        """The format's name as a file-system-safe folder name ('1.91:1' -> '1.91x1')."""
        return self.name.replace(":", "x")


class CopySpec(_Model):
    """Text set on every creative: a headline chosen by one axis's value, and a call to action."""

    axis: str = Field(description="the axis whose value picks the headline, e.g. 'audience'")
    headlines: dict[str, str] = Field(description="headline for each value of that axis")
    cta: str | None = Field(None, max_length=60, description="call to action under the headline")


class BrandSpec(_Model):
    """Brand colours. A variant's compliance is the share of its subject's pixels (the
    background left out: :mod:`genloop.campaign.brand`) within ``max_distance`` (CIELAB delta E)
    of a palette colour; with ``weight``, the loops also score the whole picture's dominant
    colours against the palette (``brand-palette``)."""

    palette: list[str] = Field(min_length=1, description="colours as '#rrggbb' or CSS names")
    min_compliance: float = Field(0.0, ge=0.0, le=1.0, description="finalists below are flagged")
    max_distance: float = Field(20.0, gt=0.0, le=100.0, description="delta E counted as a match")
    weight: float = Field(
        0.0, ge=0.0, description="score points a fully compliant candidate gains (CLIP scores run "
        "0..100): with a weight, each loop scores with a composite of loop.evaluator and "
        "brand-palette, so brand colours steer its rounds and its pick (and loop.target is on "
        "that sum's scale); 0 ranks by the evaluator alone",
    )


class LoopSettings(_Model):
    """What each variant's loop runs; unset fields take the back end's defaults."""

    model: str | None = None
    evaluator: str | None = None
    refiner: str | None = None
    rounds: int = Field(2, ge=1, le=50)
    candidates: int = Field(4, ge=1, le=256)
    target: float | None = None
    steps: int | None = Field(None, ge=1, le=200)
    guidance: float | None = Field(None, ge=0.0, le=50.0)
    width: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    height: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    seed: int = Field(0, ge=0)
    reuse: Reuse = Field(
        "auto", description="'auto': a variant's images may start from the stored latents of "
        "a similar variant's image of the same seed, skipping its first steps (the variants of "
        "one template differ in a clause or two); 'off': every image from its own noise")
    priority: Priority = Field(
        "batch", description="the variants' lane: 'batch' (the default) yields to agents' "
        "interactive loops on the same workers, keeping at least 1 engine batch in 4")

    @field_validator("reuse", mode="before")
    @classmethod
    def _yaml_switch(cls, value: Any) -> Any:
        """YAML reads a bare ``off`` (and ``no``, ``false``) as a boolean: take it as meant."""
        if isinstance(value, bool):
            return "auto" if value else "off"
        return value

    @property
    def images(self) -> int:
        """The most images one variant can cost (a loop may stop early at its target)."""
        return self.rounds * self.candidates


class FormatGeneration(_Model):
    """Draw each format again at its own shape, rather than only crop or pad the pick: from the
    pick's prompt and seed (and the next seeds), the loop's evaluator keeping the best. A format
    the model cannot draw falls back to cropping or padding."""

    size: Literal["format", "loop"] = Field(
        "format", description="'format': at the format's pixel size (down to a multiple of 8); "
        "'loop': at the pick's pixel area in the format's aspect, then scaled up (for models "
        "that draw well only near their native size)")
    candidates: int = Field(1, ge=1, le=16, description="images drawn per format")


class Budget(_Model):
    """The most a campaign may spend. Variants that would exceed it are not started."""

    images: int | None = Field(None, ge=1)
    steps: int | None = Field(None, ge=1, description="denoising steps; needs loop.steps set")


class CampaignWebhook(_Model):
    """Where the campaign reports its end (one ``campaign.ended`` delivery, through a gateway,
    signed with the tenant's webhook secret), and whether each variant's run reports its own.
    A plain URL in a spec means this with ``variants`` off."""

    url: str = Field(max_length=2000, pattern=r"^https?://")
    variants: bool = Field(False, description="also a run.ended delivery for each variant")

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value


class CampaignSpec(_Model):
    """A whole campaign. Load one from YAML, TOML or JSON with :func:`load_spec`."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)
    axes: dict[str, list[str]] = Field(
        description="axis name -> values; variants are every combination, in this order"
    )
    template: str = Field(min_length=1, description="prompt with {axis} fields")
    copy_: CopySpec | None = Field(None, alias="copy")
    formats: list[FormatSpec] = Field(
        default_factory=lambda: [FormatSpec(name=n, width=w, height=h)
                                 for n, w, h in STANDARD_FORMATS],
    )
    brand: BrandSpec | None = None
    loop: LoopSettings = Field(default_factory=LoopSettings)
    generate_formats: FormatGeneration | None = Field(
        None, description="draw formats at their own shape; None: crop or pad the pick")
    finalists: int = Field(1, ge=1, description="distinct finalists per value of group_by")
    group_by: str | None = Field(None, description="axis finalists are chosen per; default first")
    diversity: float = Field(0.5, ge=0.0, le=1.0, description="MMR trade-off among finalists")
    budget: Budget = Field(default_factory=Budget)
    webhook: CampaignWebhook | None = Field(
        None, description="a URL told when the campaign ends (and, with variants: true, when "
        "each variant's run ends), through a gateway, signed with the tenant's webhook secret")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> CampaignSpec:
        problems = _cross_field_problems(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def images_per_variant(self) -> int:
        """The most images one variant can cost: its loop, and its formats if they are drawn."""
        drawn = self.generate_formats
        return self.loop.images + (len(self.formats) * drawn.candidates if drawn else 0)

    @property
    def variant_count(self) -> int:
        """How many variants the axes make, counted without enumerating them."""
        return math.prod(len(values) for values in self.axes.values())

    @property
    def product_axis(self) -> str:
        return self.group_by or next(iter(self.axes))

    def variants(self) -> Iterator[dict[str, str]]:
        """Every combination of axis values, first axis slowest."""
        names = list(self.axes)
        for values in itertools.product(*(self.axes[n] for n in names)):
            yield dict(zip(names, values, strict=True))

    def prompt(self, values: dict[str, str]) -> str:
        return self.template.format(**values)

    def loop_for(self, values: dict[str, str]) -> Loop:
        """The loop one variant runs."""
        s = self.loop
        fields: dict[str, Any] = {
            "prompt": self.prompt(values), "rounds": s.rounds, "candidates": s.candidates,
            "target": s.target, "seed": s.seed,
            "keep": min(2, s.candidates), "priority": s.priority, "reuse": s.reuse,
        }
        optional = {"model": s.model, "evaluator": s.evaluator, "refiner": s.refiner,
                    "steps": s.steps, "guidance": s.guidance, "width": s.width,
                    "height": s.height}
        fields.update({k: v for k, v in optional.items() if v is not None})
        if self.brand is not None and self.brand.weight > 0 and s.evaluator is not None:
            # Brand colours join the loop's score, so they steer its rounds, not only its pick;
            # brand-palette scores 0..100, so weight / 100 makes `weight` the points at 100%.
            fields["evaluator"] = "composite"
            fields["evaluator_options"] = {
                "weights": {s.evaluator: 1.0, "brand-palette": self.brand.weight / 100},
                "options": {"brand-palette": {"palette": self.brand.palette,
                                              "max_distance": self.brand.max_distance}},
            }
        if self.webhook is not None and self.webhook.variants:
            fields["webhook"] = {"url": self.webhook.url}
        return Loop(**fields)

    def headline(self, values: dict[str, str]) -> str | None:
        return self.copy_.headlines.get(values[self.copy_.axis]) if self.copy_ else None


def _cross_field_problems(spec: CampaignSpec) -> list[str]:
    problems = []
    if not spec.axes:
        problems.append("axes: give at least one axis, e.g. {products: [...]}")
    for axis, values in spec.axes.items():
        if not values:
            problems.append(f"axes.{axis}: is empty; give it at least one value")
        if len(set(values)) != len(values):
            problems.append(f"axes.{axis}: repeats a value")
    count = spec.variant_count
    if count > MAX_VARIANTS:
        sizes = " x ".join(f"{len(v):,} {axis}" for axis, v in spec.axes.items())
        problems.append(f"axes: {sizes} make {count:,} variants, past the cap of "
                        f"{MAX_VARIANTS:,} a campaign; split it into several campaigns")
    try:
        fields = [f for _, f, spec_, conv in string.Formatter().parse(spec.template)
                  if f is not None]
    except ValueError as exc:
        problems.append(f"template: {exc}")
        fields = []
    for field in fields:
        if field not in spec.axes:
            problems.append(f"template: {{{field}}} is not an axis (axes: {', '.join(spec.axes)})")
    if not fields:
        problems.append("template: uses no axis, so every variant would get the same prompt")
    for axis in ("group_by",):
        value = getattr(spec, axis)
        if value is not None and value not in spec.axes:
            problems.append(f"{axis}: {value!r} is not an axis")
    if spec.copy_ is not None:
        problems += _copy_problems(spec.copy_, spec.axes)
    if spec.brand is not None:
        problems += _palette_problems(spec.brand.palette)
        if spec.brand.weight > 0 and spec.loop.evaluator is None:
            problems.append("loop.evaluator: name it when brand.weight > 0, so the loop can "
                            "score it and the brand colours together")
    for i, fmt in enumerate(spec.formats):
        if max(fmt.aspect, 1 / fmt.aspect) > MAX_ASPECT:
            problems.append(
                f"formats[{i}] ({fmt.name}): aspect {fmt.width}x{fmt.height} is beyond "
                f"{MAX_ASPECT:g}:1; it can be neither generated nor cropped to"
            )
    if len({f.slug for f in spec.formats}) != len(spec.formats):
        problems.append("formats: two formats share a name")
    if not spec.formats:
        problems.append("formats: give at least one format")
    problems += _budget_problems(spec)
    return problems


def _copy_problems(copy: CopySpec, axes: dict[str, list[str]]) -> list[str]:
    if copy.axis not in axes:
        return [f"copy.axis: {copy.axis!r} is not an axis (axes: {', '.join(axes)})"]
    values = set(axes[copy.axis])
    problems = []
    missing = sorted(values - set(copy.headlines))
    if missing:
        problems.append(f"copy.headlines: no headline for {missing}")
    stray = sorted(set(copy.headlines) - values)
    if stray:
        problems.append(f"copy.headlines: {stray} are not values of axis {copy.axis!r}")
    return problems


def _palette_problems(palette: list[str]) -> list[str]:
    from genloop.evaluators.options import MAX_PALETTE
    from genloop.evaluators.palette import parse_colour

    # A gateway refuses a longer palette in each variant's loop; here the whole campaign is
    # refused before anything is submitted, on any back end.
    if len(palette) > MAX_PALETTE:
        return [f"brand.palette: {len(palette)} colours; at most {MAX_PALETTE}"]
    problems = []
    for i, colour in enumerate(palette):
        try:
            parse_colour(colour)
        except ValueError:
            problems.append(f"brand.palette[{i}]: {colour!r} is not a colour ('#e4002b', 'navy')")
    return problems


def _budget_problems(spec: CampaignSpec) -> list[str]:
    per_variant = spec.images_per_variant
    problems = []
    if spec.budget.images is not None and spec.budget.images < per_variant:
        drawn = spec.generate_formats
        formats = (f" + {len(spec.formats)} formats x {drawn.candidates} drawn" if drawn else "")
        problems.append(
            f"budget.images: {spec.budget.images} is less than one variant costs "
            f"({spec.loop.rounds} rounds x {spec.loop.candidates} candidates{formats} = "
            f"{per_variant})"
        )
    if spec.budget.steps is not None:
        if spec.loop.steps is None:
            problems.append("budget.steps: set loop.steps too, so the cost of a variant is known")
        elif spec.budget.steps < per_variant * spec.loop.steps:
            problems.append(
                f"budget.steps: {spec.budget.steps} is less than one variant costs "
                f"({per_variant} images x {spec.loop.steps} steps)"
            )
    return problems


def parse_spec(data: dict[str, Any]) -> CampaignSpec:
    """Validate a spec given as plain data; raises :class:`CampaignSpecError` with every problem."""
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "spec"
            message = err["msg"].removeprefix("Value error, ")
            problems += [p if where == "spec" else f"{where}: {p}" for p in message.split("\n")]
        raise CampaignSpecError(problems) from None


def load_spec(path: str | Path) -> CampaignSpec:
    """Read a spec from a ``.yaml``/``.yml``, ``.toml`` or ``.json`` file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CampaignSpecError([f"{path}: cannot read it ({exc.strerror})"]) from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            import json

            data = json.loads(text)
        else:
            raise CampaignSpecError([f"{path}: use a .yaml, .toml or .json file"])
    except CampaignSpecError:
        raise
    except Exception as exc:  # each parser raises its own error type for bad syntax
        raise CampaignSpecError([f"{path}: not valid {path.suffix[1:]}: {exc}"]) from None
    if not isinstance(data, dict):
        raise CampaignSpecError([f"{path}: the top level must be a mapping"])
    return parse_spec(data)
