"""``refine``: next round's generation requests from the scored candidates seen so far.

Strategies are pluggable: ``@refiner("name")`` registers ``fn(scored, params) -> requests`` in
:data:`default_refiners`; a runtime given its own :class:`RefinerRegistry`
(``Resources(refiners=...)``, ``Client.local(refiners=...)``) runs the strategies it holds.
- ``seed-search``: the best ``keep`` candidates stay in the result as they are; the round's
  budget goes to fresh seeds, drawn deterministically from the best seeds and the round, so a
  rerun asks for the same images (and finds them stored).
- ``prompt-variants``: the best seeds again, each with the prompt plus a modifier, so a round
  measures what the wording changes with the noise held fixed.
- ``prompt-history``: a :class:`~.rewriters.PromptRewriter` (``params.rewriter``; default
  rule-based) reads every (prompt, score) so far and writes the next prompts; the best seeds
  are kept so the wording is what changes.
- ``draft``: round 1 made cheap drafts (few steps); each later round finishes the best drafts
  not yet finished: img2img from the draft at full steps and
  :data:`~genloop.sdk.ops.DRAFT_FINISH_STRENGTH`, same seed, so what the judge ranked is what
  gets finished. It buys several times the candidates for the same compute, and works as far
  as a draft's score ranks like its finished image's.
- ``critic-edit``: needs a critic evaluator (``shapes-critic``, ``clause-critic``). Half the
  round edits the best images (img2img at :data:`EDIT_STRENGTH`), each request saying which
  clause the critic found weakest and why; on free text the weak clause is repeated at the end
  of the prompt for emphasis (a grammar-bound prompt, like a shapes caption, is kept as it is).
  The other half are fresh seeds, as ``seed-search`` draws them.
- ``agent``: the loop pauses and an agent answers (see :mod:`genloop.workers.runtime.agent_refine`);
  with no answer within ``timeout`` s, ``fallback`` decides.
When a score reaches ``target``, when ``give_up.rounds`` rounds have brought no score to
``give_up.below``, or when ``budget`` (denoising steps) leaves room for no request, refine halts
the loop: nodes downstream are skipped. Otherwise the requests are cut, in the
order the strategy gave them, to what the budget has left.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import (
    GenerationRequest,
    RefineParams,
    ScoredCandidate,
    edit_steps,
    finish_strength,
)

from ..runtime.context import OpContext
from ..runtime.deferred import Deferred
from .registry import OpSpec

Refiner = Callable[[list[ScoredCandidate], RefineParams], list[GenerationRequest]]

PROMPT_MODIFIERS = (
    "highly detailed", "studio lighting", "sharp focus", "vivid colours", "centred composition",
    "soft natural light", "high contrast", "clean background",
)


class RefinerRegistry(Mapping[str, Refiner]):
    """Refine strategies by name. ``agent`` is built into the refine op rather than held
    here, but :meth:`describe` lists it with the others (it is a strategy a spec may name)."""

    def __init__(self, strategies: Mapping[str, Refiner] | None = None) -> None:
        self._strategies: dict[str, Refiner] = dict(strategies or {})

    def register(self, name: str, fn: Refiner) -> Refiner:
        if name == "agent":
            raise Permanent("'agent' is built into the refine op; pick another name")
        self._strategies[name] = fn
        return fn

    def __getitem__(self, name: str) -> Refiner:
        return self._strategies[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._strategies)

    def __len__(self) -> int:
        return len(self._strategies)

    def describe(self) -> dict[str, str]:
        """Strategy names, ``agent`` among them, and the first paragraph of each one's
        docstring, on one line."""
        named = {name: " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
                 for name, fn in self._strategies.items()}
        return {**named, "agent": AGENT_DESCRIPTION}

    def names(self) -> list[str]:
        """Every name a spec may give as a strategy, sorted."""
        return sorted(self.describe())


#: Where ``@refiner`` registers by default, with the built-in strategies.
default_refiners = RefinerRegistry()


def refiner(name: str, *, registry: RefinerRegistry | None = None
            ) -> Callable[[Refiner], Refiner]:
    """Register a refine strategy under ``name`` (in :data:`default_refiners` unless given
    another ``registry``)."""

    def register(fn: Refiner) -> Refiner:
        return (registry if registry is not None else default_refiners).register(name, fn)

    return register


#: What ``agent`` does (``refine.requested`` events, answered with ``run.refine``).
AGENT_DESCRIPTION = ("The loop pauses for an agent's answer (run.refine / POST "
                     "/v1/runs/{id}/refine) each round; the fallback strategy decides when none "
                     "comes in refine_timeout seconds.")


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


@refiner("prompt-history")
def prompt_history(scored: list[ScoredCandidate],
                   params: RefineParams) -> list[GenerationRequest]:
    """New prompts written by a rewriter (the rewriter option) from every (prompt, score) so
    far, on the best seeds."""
    from .rewriters import get_rewriter

    try:
        rewriter = get_rewriter(params.rewriter)
    except KeyError as exc:
        raise Permanent(str(exc)) from exc
    best = _best(scored, params.keep)
    prompts = rewriter.rewrite([(c.prompt, c.score) for c in scored], params.candidates)
    return [
        GenerationRequest(prompt=p, seed=best[j % len(best)].seed, round=params.round + 1,
                          reason=f"rewritten by {params.rewriter!r} from the history")
        for j, p in enumerate(prompts[:params.candidates])
    ]


@refiner("draft")
def draft(scored: list[ScoredCandidate], params: RefineParams) -> list[GenerationRequest]:
    """Round 1 draws cheap drafts (few steps); each later round finishes the best-scored
    drafts (img2img from the draft at full steps, same seed)."""
    full = params.steps or max(c.steps for c in scored)
    finished = {c.seed for c in scored if c.strength is not None}
    drafts = sorted((c for c in scored
                     if c.strength is None and c.steps < full and c.seed not in finished),
                    key=lambda c: (-c.score, c.index))
    strength = finish_strength(full)
    requests = [
        GenerationRequest(
            prompt=c.prompt, seed=c.seed, round=params.round + 1, steps=full,
            init_image=c.artifact, strength=strength,
            reason=f"finish draft seed {c.seed}: draft rank {rank + 1} of {len(drafts)}, "
            f"score {c.score:.2f} at {c.steps} steps",
        )
        for rank, c in enumerate(drafts[:params.candidates])
    ]
    if len(requests) < params.candidates:  # every draft finished: search fresh seeds
        requests += seed_search(scored, params)[:params.candidates - len(requests)]
    return requests


#: How far an edit departs from the image it fixes: enough noise to redraw a shape or move it,
#: little enough that what the critic liked mostly stays.
EDIT_STRENGTH = 0.6


@refiner("critic-edit")
def critic_edit(scored: list[ScoredCandidate], params: RefineParams) -> list[GenerationRequest]:
    """Half the round edits the best images (img2img), naming the critic's weakest clause in
    the prompt; the other half are fresh seeds. Use with a critic evaluator."""
    from genloop.evaluators.clauses import DEFAULT_SPLITTERS

    best = _best(scored, params.keep)
    structured = any(split(params.prompt) for split in DEFAULT_SPLITTERS)
    tried = {c.seed for c in scored}
    n_edits = (params.candidates + 1) // 2
    requests = []
    for j in range(n_edits):
        parent = best[j % len(best)]
        seed = _fresh_seed(f"edit:{parent.seed}:{params.round}:{j}", tried)
        prompt, why = parent.prompt, "no critique (the evaluator is not a critic)"
        if parent.details is not None and parent.details.weakest is not None:
            weak = next(c for c in parent.details.clauses if c.clause == parent.details.weakest)
            why = f"its weakest clause is {weak.clause} {weak.text!r} ({weak.score:.1f}/100)"
            if not structured and weak.text not in prompt.split(", ")[1:]:
                prompt = f"{prompt}, {weak.text}"
        requests.append(GenerationRequest(
            prompt=prompt, seed=seed, round=params.round + 1, init_image=parent.artifact,
            strength=EDIT_STRENGTH,
            reason=f"edit of seed {parent.seed} (score {parent.score:.2f}): {why}",
        ))
    fresh = seed_search(scored, params)[:params.candidates - n_edits]
    return requests + [r.model_copy(update={"reason": "fresh seed"}) for r in fresh]


def _fresh_seed(key: str, tried: set[int]) -> int:
    rng = random.Random(key)
    seed = rng.randrange(2**31)
    while seed in tried:
        seed = rng.randrange(2**31)
    tried.add(seed)
    return seed


def request_cost(request: GenerationRequest, steps: int | None) -> int:
    """Denoising steps ``request`` will cost when the generate node runs ``steps``."""
    full = request.steps or steps or 0
    if request.init_image is None:
        return full
    return edit_steps(full, request.strength or EDIT_STRENGTH)


def within_budget(requests: list[GenerationRequest], scored: list[ScoredCandidate],
                  params: RefineParams) -> list[GenerationRequest]:
    """The first requests that fit in what ``params.budget`` has left after ``scored``."""
    if params.budget is None:
        return requests
    left = params.budget - sum(c.cost for c in scored)
    kept = []
    for r in requests:
        cost = request_cost(r, params.steps)
        if cost > left:
            break
        left -= cost
        kept.append(r)
    return kept


def refine(params: RefineParams, inputs: list,
           ctx: OpContext) -> list[GenerationRequest] | Deferred:
    """Runs the strategy named in ``params`` from the process's refiners
    (``ctx.resources.refiners``)."""
    strategies: RefinerRegistry = ctx.resources.refiners
    strategy = strategies.get(params.strategy)
    if strategy is None and params.strategy != "agent":
        raise Permanent(f"unknown refine strategy {params.strategy!r} "
                        f"(known: {', '.join(strategies.names())})")
    scored = [ScoredCandidate.model_validate(i, from_attributes=True) for i in inputs]
    if not scored:
        raise Permanent("refine got no scored candidates")
    best = max(c.score for c in scored)
    if params.target is not None and best >= params.target:
        ctx.halt()
        return []
    if (params.give_up is not None and params.round >= params.give_up.rounds
            and best < params.give_up.below):
        ctx.log.info("no score reached %s in %d rounds (best %.1f): the loop gives up",
                     params.give_up.below, params.round, best)
        ctx.halt()
        return []
    if params.strategy == "agent":
        from ..runtime.agent_refine import ask

        def answered(requests: list[GenerationRequest] | None) -> list[GenerationRequest]:
            if requests is None:
                fallback = strategies.get(params.fallback)
                if fallback is None:
                    raise Permanent(f"unknown fallback strategy {params.fallback!r}")
                requests = fallback(scored, params)
            return _spend(requests, scored, params, ctx)

        return Deferred(ask(ctx, scored, params), then=answered)
    assert strategy is not None  # checked above: only "agent" has none
    return _spend(strategy(scored, params), scored, params, ctx)


#: The built-in op (see :mod:`.builtin`).
REFINE = OpSpec("refine", refine, params=RefineParams, output=GenerationRequest)


def _spend(requests: list[GenerationRequest], scored: list[ScoredCandidate],
           params: RefineParams, ctx: OpContext) -> list[GenerationRequest]:
    """The requests the budget allows; none left halts the loop."""
    requests = within_budget(requests, scored, params)
    if not requests:
        ctx.log.info("budget of %s steps spent: the loop stops", params.budget)
        ctx.halt()
    return requests
