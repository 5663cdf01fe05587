"""Splitting a prompt into the clauses a critic scores one by one.

A clause is one thing the prompt asks for. Where the prompt follows a known grammar (the shapes
world's captions) each clause comes with *alternatives*: the whole prompt with only that clause
changed ("a large red circle ..." -> "a large blue circle ..."). A critic can then ask CLIP a
question it answers well (which of these captions fits?) instead of one it answers badly (how
well does this caption fit, on an absolute scale?). Free text has no alternatives: its clauses
are the comma- and "and"-separated parts, scored on their own.

Splitters are tried in order; the first that recognises the prompt wins. The shapes splitter
reads the caption through ``genloop.shapes.parse_caption``: a one-object caption's
clauses are its attributes, a two-object caption's are each object's size, colour and shape,
the relation and the background (``shapes.PAIR_CLAUSES``), so a critic can say *which* object
is wrong. Alternatives come from ``shapes.one_attribute_variants``, which leaves out a change
that shows the same picture (a relation flipped between identical objects). Imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Clause:
    """One clause: ``name`` (what it is about), ``text`` (its words) and the full-prompt
    ``alternatives`` that differ from the prompt in this clause alone (may be empty)."""

    name: str
    text: str
    alternatives: tuple[str, ...] = field(default=())


Splitter = Callable[[str], "list[Clause] | None"]

_FREE_SPLIT = re.compile(r"\s*(?:,|;|\band\b|\bwith\b)\s*", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:a|an|the)\s+", re.IGNORECASE)


def shapes_clauses(prompt: str) -> list[Clause] | None:
    """Clauses of a shapes-world caption, or ``None`` if it is not one.

    One object: one clause per attribute (``colour``, ``shape``, ...), its text the value.
    Two objects: ``first.size`` ... ``second.shape``, ``relation`` and ``background``."""
    from genloop import shapes

    try:
        scene = shapes.parse_caption(prompt)
    except ValueError:
        return None
    one = isinstance(scene, shapes.Attributes)
    clauses = []
    for name in shapes.ATTRIBUTE_NAMES if one else shapes.PAIR_CLAUSES:
        owner, _, field_name = name.rpartition(".")
        value = getattr(getattr(scene, owner) if owner else scene, field_name)
        alternatives = tuple(v.caption() for v in shapes.one_attribute_variants(scene, name))
        clauses.append(Clause(name=name, text=value, alternatives=alternatives))
    return clauses


def free_text_clauses(prompt: str) -> list[Clause]:
    """Comma-, semicolon-, "and"- and "with"-separated parts, leading articles dropped."""
    parts = [_ARTICLE.sub("", p.strip()) for p in _FREE_SPLIT.split(prompt)]
    parts = [p for p in parts if p]
    return [Clause(name=p, text=p) for p in (parts or [prompt.strip()])]


#: Splitters tried before free text, in order.
DEFAULT_SPLITTERS: tuple[Splitter, ...] = (shapes_clauses,)


def split_clauses(prompt: str, splitters: Sequence[Splitter] = DEFAULT_SPLITTERS) -> list[Clause]:
    """The clauses of ``prompt``: the first splitter that knows its grammar, else free text."""
    for splitter in splitters:
        clauses = splitter(prompt)
        if clauses:
            return clauses
    return free_text_clauses(prompt)
