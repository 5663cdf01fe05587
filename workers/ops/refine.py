"""``refine``: next round's generation requests from the scored candidates seen so far.

Strategies are pluggable: ``@refiner("name")`` registers ``fn(scored, params) -> requests``.
- ``seed-search``: the best ``keep`` candidates stay in the result as they are; the round's
  budget goes to fresh seeds, drawn deterministically from the best seeds and the round, so a
  rerun asks for the same images (and finds them stored).
- ``prompt-variants``: the best seeds again, each with the prompt plus a modifier, so a round
  measures what the wording changes with the noise held fixed.
When a score reaches ``target``, refine halts the loop: nodes downstream are skipped.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import GenerationRequest, RefineParams, ScoredCandidate

from ..context import OpContext
from .registry import op

Refiner = Callable[[list[ScoredCandidate], RefineParams], list[GenerationRequest]]
_REFINERS: dict[str, Refiner] = {}

PROMPT_MODIFIERS = (
    "highly detailed", "studio lighting", "sharp focus", "vivid colours", "centred composition",
    "soft natural light", "high contrast", "clean background",
)


def refiner(name: str) -> Callable[[Refiner], Refiner]:
    """Register a refine strategy under ``name``."""

    def register(fn: Refiner) -> Refiner:
        _REFINERS[name] = fn
        return fn

    return register


def refiners() -> dict[str, str]:
    """Registered strategy names and the first line of each one's docstring."""
    return {name: (fn.__doc__ or "").strip().split("\n")[0] for name, fn in _REFINERS.items()}


def _best(scored: list[ScoredCandidate], keep: int) -> list[ScoredCandidate]:
    return sorted(scored, key=lambda c: (-c.score, c.round, c.index))[:keep]


@refiner("seed-search")
def seed_search(scored: list[ScoredCandidate], params: RefineParams) -> list[GenerationRequest]:
    """Fresh seeds drawn around the best candidates' seeds; the usual choice."""
    best = _best(scored, params.keep)
    tried = {c.seed for c in scored}
    requests = []
    for j in range(params.candidates):
        parent = best[j % len(best)]
        rng = random.Random(f"{parent.seed}:{params.round}:{j}")
        seed = rng.randrange(2**31)
        while seed in tried:
            seed = rng.randrange(2**31)
        tried.add(seed)
        requests.append(GenerationRequest(prompt=parent.prompt, seed=seed, round=params.round + 1))
    return requests


@refiner("prompt-variants")
def prompt_variants(scored: list[ScoredCandidate],
                    params: RefineParams) -> list[GenerationRequest]:
    """The best seeds again, each with the prompt plus a style modifier ('sharp focus', ...)."""
    best = _best(scored, params.keep)
    offset = (params.round - 1) * params.candidates
    return [
        GenerationRequest(
            prompt=f"{params.prompt}, {PROMPT_MODIFIERS[(offset + j) % len(PROMPT_MODIFIERS)]}",
            seed=best[j % len(best)].seed, round=params.round + 1,
        )
        for j in range(params.candidates)
    ]


@op("refine", params=RefineParams, output=GenerationRequest)
def refine(params: RefineParams, inputs: list, ctx: OpContext) -> list[GenerationRequest]:
    strategy = _REFINERS.get(params.strategy)
    if strategy is None:
        raise Permanent(f"unknown refine strategy {params.strategy!r} "
                        f"(known: {', '.join(sorted(_REFINERS))})")
    scored = [ScoredCandidate.model_validate(i, from_attributes=True) for i in inputs]
    if not scored:
        raise Permanent("refine got no scored candidates")
    if params.target is not None and max(c.score for c in scored) >= params.target:
        ctx.halt()
        return []
    return strategy(scored, params)
