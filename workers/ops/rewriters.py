"""Prompt rewriters for the ``prompt-history`` refiner: a history of (prompt, score) in, the
next prompts out.

A rewriter is anything with ``rewrite(history, n)`` (:class:`PromptRewriter`): a rule table, a
local language model, an OPT2I-style optimiser that learns from which wordings scored well. It
runs in the worker process; an agent outside it answers ``refine.requested`` instead. Register
one with :func:`register_rewriter` and name it in ``RefineParams.rewriter``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

#: The default rewriter's phrases; each is tried once before any is tried again.
MODIFIERS = (
    "highly detailed", "studio lighting", "sharp focus", "vivid colours", "centred composition",
    "soft natural light", "high contrast", "clean background",
)


class PromptRewriter(Protocol):
    """Turns what was tried and how it scored into ``n`` prompts to try next."""

    def rewrite(self, history: Sequence[tuple[str, float]], n: int) -> list[str]: ...


class RuleRewriter:
    """The default: the best-scoring prompt so far (mean score over its images), plus a
    modifier it has not been tried with; the best prompt itself once every one has."""

    def __init__(self, modifiers: Sequence[str] = MODIFIERS) -> None:
        self.modifiers = tuple(modifiers)

    def rewrite(self, history: Sequence[tuple[str, float]], n: int) -> list[str]:
        if not history:
            raise ValueError("a rewriter needs at least one scored prompt")
        totals: dict[str, list[float]] = {}
        for prompt, score in history:
            totals.setdefault(prompt, []).append(score)
        best = max(totals, key=lambda p: (sum(totals[p]) / len(totals[p]), -len(p)))
        untried = [m for m in self.modifiers if f"{best}, {m}" not in totals]
        return [f"{best}, {untried[j]}" if j < len(untried) else best for j in range(n)]


_REWRITERS: dict[str, PromptRewriter] = {"rules": RuleRewriter()}


def register_rewriter(name: str, rewriter: PromptRewriter) -> None:
    """Make ``rewriter`` available to ``prompt-history`` as ``RefineParams.rewriter=name``."""
    _REWRITERS[name] = rewriter


def get_rewriter(name: str) -> PromptRewriter:
    try:
        return _REWRITERS[name]
    except KeyError:
        raise KeyError(f"unknown prompt rewriter {name!r} (known: "
                       f"{', '.join(sorted(_REWRITERS))})") from None
