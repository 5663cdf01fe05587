"""What a shapes caption says: one object at a place, or two objects and where one is.

The grammar is fixed and parses both ways, which is what lets the checker grade a generated
image against the prompt that made it::

    a large red circle in the centre, black background                 -> Attributes
    a small red star left of a large blue square, white background     -> Pair

A pair can be said two ways ("A left of B" is "B right of A"); :meth:`Pair.canonical` picks one,
so code that asks "do these two captions describe the same picture?" compares canonical forms.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 230),
    "yellow": (240, 220, 40),
    "purple": (150, 60, 200),
    "cyan": (40, 200, 220),
}
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "gray": (128, 128, 128),
}
SHAPES = ("circle", "square", "triangle", "star")
SIZES = ("small", "large")
POSITIONS = ("centre", "left", "right", "top", "bottom")
RELATIONS = ("left of", "right of", "above", "below")
#: The clauses of a one-object caption, in caption order.
ATTRIBUTE_NAMES = ("colour", "shape", "size", "position", "background")
#: The clauses of a two-object caption, in caption order.
PAIR_CLAUSES = ("first.size", "first.colour", "first.shape", "relation",
                "second.size", "second.colour", "second.shape", "background")

Colour = Literal["red", "green", "blue", "yellow", "purple", "cyan"]
Shape = Literal["circle", "square", "triangle", "star"]
Size = Literal["small", "large"]
Position = Literal["centre", "left", "right", "top", "bottom"]
Relation = Literal["left of", "right of", "above", "below"]
Background = Literal["black", "white", "gray"]

POSITION_PHRASE = {
    "centre": "in the centre",
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
}
#: "A <relation> B" says the same as "B <CONVERSE[relation]> A".
CONVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
#: What a place or relation becomes in a left-right mirror image.
_MIRRORED = {"left": "right", "right": "left", "left of": "right of", "right of": "left of"}


class Thing(BaseModel):
    """One object as a caption names it."""

    model_config = ConfigDict(frozen=True)

    colour: Colour
    shape: Shape
    size: Size

    def phrase(self) -> str:
        return f"a {self.size} {self.colour} {self.shape}"


class Attributes(BaseModel):
    """A one-object scene: what its caption says and what the checker reads back."""

    model_config = ConfigDict(frozen=True)

    colour: Colour
    shape: Shape
    size: Size
    position: Position
    background: Background

    @property
    def thing(self) -> Thing:
        return Thing(colour=self.colour, shape=self.shape, size=self.size)

    @property
    def things(self) -> tuple[Thing, ...]:
        return (self.thing,)

    def caption(self) -> str:
        return (f"{self.thing.phrase()} {POSITION_PHRASE[self.position]}, "
                f"{self.background} background")

    def canonical(self) -> Attributes:
        return self

    def mirrored(self) -> Attributes:
        """What the caption of this scene's left-right mirror image says (every shape is
        symmetric about the vertical, so only the place can change)."""
        return self.model_copy(update={"position": _MIRRORED.get(self.position, self.position)})


class Pair(BaseModel):
    """A two-object scene: ``first`` stands ``relation`` ``second``."""

    model_config = ConfigDict(frozen=True)

    first: Thing
    relation: Relation
    second: Thing
    background: Background

    @property
    def things(self) -> tuple[Thing, ...]:
        return (self.first, self.second)

    def caption(self) -> str:
        return (f"{self.first.phrase()} {self.relation} {self.second.phrase()}, "
                f"{self.background} background")

    def converse(self) -> Pair:
        """The same picture said the other way round."""
        return Pair(first=self.second, relation=CONVERSE[self.relation], second=self.first,
                    background=self.background)

    def canonical(self) -> Pair:
        """The form whose relation is "left of" or "above" (identical objects: either)."""
        return self if self.relation in ("left of", "above") else self.converse()

    def mirrored(self) -> Pair:
        """What the caption of this scene's left-right mirror image says."""
        return self.model_copy(update={"relation": _MIRRORED.get(self.relation, self.relation)})


Scene = Attributes | Pair

_THING = r"a (?P<{p}size>\w+) (?P<{p}colour>\w+) (?P<{p}shape>\w+)"
_ONE_RE = re.compile(
    "^" + _THING.format(p="") + r" (?P<position>(?:in|on|at) the \w+), "
    r"(?P<background>\w+) background$")
_PAIR_RE = re.compile(
    "^" + _THING.format(p="a_") + r" (?P<relation>left of|right of|above|below) "
    + _THING.format(p="b_") + r", (?P<background>\w+) background$")
_PHRASE_TO_POSITION = {v: k for k, v in POSITION_PHRASE.items()}


def parse_caption(caption: str) -> Scene:
    """Inverse of ``caption()``: :class:`Attributes` or :class:`Pair`; ``ValueError`` otherwise."""
    text = caption.strip().lower()
    one = _ONE_RE.match(text)
    if one is not None:
        fields = one.groupdict()
        if fields["position"] not in _PHRASE_TO_POSITION:
            raise ValueError(f"unknown position phrase {fields['position']!r} in {caption!r}")
        fields["position"] = _PHRASE_TO_POSITION[fields["position"]]
        return Attributes.model_validate(fields)
    pair = _PAIR_RE.match(text)
    if pair is not None:
        g = pair.groupdict()
        return Pair(
            first=Thing(colour=g["a_colour"], shape=g["a_shape"], size=g["a_size"]),
            relation=g["relation"],
            second=Thing(colour=g["b_colour"], shape=g["b_shape"], size=g["b_size"]),
            background=g["background"],
        )
    raise ValueError(
        f"not a shapes caption: {caption!r}; expected e.g. "
        "'a large red circle in the centre, black background' or "
        "'a small red star left of a large blue square, white background'"
    )


_CHOICES: dict[str, tuple[str, ...]] = {
    "colour": tuple(COLOURS), "shape": SHAPES, "size": SIZES, "position": POSITIONS,
    "background": tuple(BACKGROUNDS), "relation": RELATIONS,
}


def one_attribute_variants(scene: Scene, attribute: str) -> list[Scene]:
    """Every scene that differs from ``scene`` in exactly ``attribute`` and shows another picture.

    One object: ``attribute`` is one of :data:`ATTRIBUTE_NAMES`. Two objects: one of
    :data:`PAIR_CLAUSES`, or ``"order"`` (the two objects swapped, relation kept). Variants that
    describe the same picture as ``scene`` (a relation flip between identical objects) are left
    out, so each one is a true negative.
    """
    if isinstance(scene, Attributes):
        if attribute not in ATTRIBUTE_NAMES:
            raise ValueError(f"one-object attributes are {ATTRIBUTE_NAMES}, not {attribute!r}")
        current = getattr(scene, attribute)
        return [scene.model_copy(update={attribute: v})
                for v in _CHOICES[attribute] if v != current]
    if attribute == "order":
        candidates: list[Pair] = [scene.model_copy(
            update={"first": scene.second, "second": scene.first})]
    elif attribute in ("relation", "background"):
        candidates = [scene.model_copy(update={attribute: v})
                      for v in _CHOICES[attribute] if v != getattr(scene, attribute)]
    elif attribute in PAIR_CLAUSES:
        which, field = attribute.split(".")
        thing: Thing = getattr(scene, which)
        candidates = [scene.model_copy(update={which: thing.model_copy(update={field: v})})
                      for v in _CHOICES[field] if v != getattr(thing, field)]
    else:
        raise ValueError(f"two-object clauses are {PAIR_CLAUSES} or 'order', not {attribute!r}")
    same = scene.canonical()
    return [c for c in candidates if c.canonical() != same]
