"""Loops: generate -> score -> refine, round after round, as one submission.

A :class:`Loop` compiles to a plain :class:`~genloop.sdk.graph.Graph` with its rounds unrolled::

    round-1/generate  (n = candidates, seeds seed .. seed + candidates - 1; or
                       n = draft_candidates at draft_steps, when drafting)
    round-1/score     (against the loop's prompt)
    round-1/refine    (inputs: every score node so far; outputs the next round's requests)
    round-2/generate  (map=True over round-1/refine: one image per request)
    round-2/score
    ...
    round-R/score     (the last round has no refine)

A back end may serve a *recipe* for a model: the settings of the best loop measured on it
(``client.schema().served.recipes``). A Loop that sets none of the recipe's fields
(:data:`RECIPE_FIELDS`: evaluator, refiner, candidates, rounds, target, give_up, steps, budget,
...) runs with them, so ``Loop(prompt=...)`` alone gets the best measured loop; one that sets
any of them gets the plain defaults below for the rest.

With ``refiner="agent"`` each refine pauses: the run emits ``refine.requested`` (a
:class:`~genloop.sdk.ops.RefineRequest` as its message) and waits up to ``refine_timeout`` s for
``run.refine(...)``, then lets ``fallback`` decide.

The stop guard is the refine op: when a score reaches ``target``, when ``give_up.rounds``
rounds have brought no score to ``give_up.below``, or when the denoising-step ``budget`` has
nothing left for another image, it halts, and every node downstream of it is
skipped, so the run ends early and succeeds. Each refine tolerates failed
candidates (``min_success=1``): one broken image never breaks the loop.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .graph import PRIORITY, RETENTION, Graph, Priority, RunLimits
from .labels import Labels
from .ops import (
    BACKEND_DEFAULT,
    CACHE_DESCRIPTION,
    CACHE_PATTERN,
    MAX_CANDIDATES_PER_NODE,
    REUSE_DESCRIPTION,
    GiveUp,
    Reuse,
    edit_steps,
    finish_strength,
)
from .webhooks import WebhookTarget

#: What a model's recipe decides (see :meth:`Loop.with_recipe`). A Loop that sets any of them
#: keeps the plain defaults for the rest: a recipe's parts belong together (its target is on its
#: evaluator's scale, its rounds fit its steps and budget).
RECIPE_FIELDS = frozenset({
    "evaluator", "evaluator_options", "refiner", "candidates", "rounds", "target", "give_up",
    "keep", "steps", "guidance", "budget", "draft_candidates", "draft_steps",
})


class Loop(BaseModel):
    """A generate -> evaluate -> refine loop over ``rounds`` rounds of ``candidates`` images."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "loop", "prompt": "a large red circle in the centre, black background"},
        {"kind": "loop", "prompt": "a small blue square", "candidates": 4, "rounds": 3,
         "target": 30.0, "keep": 1, "model": "shapes", "evaluator": "shapes-clip"},
    ]})

    kind: Literal["loop"] = Field(
        default="loop", description="Always 'loop'; tells a Loop from a Graph in a submission.")
    prompt: str = Field(
        min_length=1, description="What the images should show, in plain words. Every round "
        "generates from it and is scored against it.")
    candidates: int = Field(
        8, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="Images per round. candidates x rounds is the most images the loop "
        "makes (its cost). Typical 4-16.")
    rounds: int = Field(
        3, ge=1, le=50, description="Generate-score-refine rounds. Each round after the first "
        "starts from the best candidates so far. Typical 2-5; 1 is plain best-of-N.")
    target: float | None = Field(
        None, allow_inf_nan=False,
        description="Stop early once any score reaches this, on the evaluator's scale "
        "(CLIP-style: about 0-40; a critic's on a shapes caption: the chance x 100 that "
        "every clause holds, so 50 stops once an image is more likely right than wrong); "
        "the remaining rounds are skipped and the run succeeds. Omit to always run every "
        "round.")
    give_up: GiveUp | None = Field(
        None, description="Stop early on a prompt the model seems unable to draw: after "
        "give_up.rounds rounds, if no score has reached give_up.below, the rest are skipped and "
        "the best image so far is kept (e.g. {'rounds': 4, 'below': 50} with a critic). Omit "
        "to spend every round.")
    evaluator: str | None = Field(
        None, description="Name of the evaluator that scores every image against the prompt. "
        + BACKEND_DEFAULT)
    evaluator_options: dict[str, Any] | None = Field(
        None, description="Settings for the evaluator (see the score op's `options`), e.g. "
        "evaluator 'composite' with {'weights': {'clip': 1, 'brand-palette': 0.2}, 'options': "
        "{'brand-palette': {'palette': ['#e4002b']}}} to score prompt match and brand colours "
        "together. Usually left out.")
    refiner: str = Field(
        "seed-search", description="Name of the strategy that picks the next round's requests "
        "from the scores so far: 'seed-search' (fresh seeds around the best) is the usual "
        "choice; `genloop schema` lists what this back end serves.")
    model: str | None = Field(
        None, description="Name of the text-to-image model. " + BACKEND_DEFAULT)
    seed: int = Field(
        0, ge=0, description="Seed of round 1's first candidate (round 1 uses seed .. seed + "
        "candidates - 1). Same spec and seed, same images.")
    keep: int = Field(
        2, ge=1, description="How many of the best candidates seed the next round. 1 "
        "exploits, larger explores. Typical 1-4; capped at `candidates`.")
    steps: int | None = Field(
        None, ge=1, le=200, description="Denoising steps per image: more is slower and usually "
        "sharper. Omit for the model's default.")
    guidance: float | None = Field(
        None, ge=0.0, le=50.0, allow_inf_nan=False,
        description="Classifier-free guidance: how strongly images "
        "follow the prompt. Omit for the model's default (typically 4-8).")
    width: int | None = Field(
        None, ge=8, le=4096, multiple_of=8,
        description="Image width in pixels, a multiple of 8. Omit for the model's native size.")
    height: int | None = Field(
        None, ge=8, le=4096, multiple_of=8,
        description="Image height in pixels, a multiple of 8. Omit for the model's native size.")
    cache: str = Field(
        "default", pattern=CACHE_PATTERN,
        description=CACHE_DESCRIPTION + " Applies to every image the loop makes, edits too.")
    reuse: Reuse = Field(
        "off", description=REUSE_DESCRIPTION + " Applies to every text-to-image candidate of "
        "the loop (a refiner that keeps seeds and rewrites the prompt starts its later rounds "
        "from the first round's latents); campaigns run their loops with 'auto'.")
    max_retries: int | None = Field(
        None, ge=0, le=100, description="Retries of each node after a transient failure. Omit "
        "for each op's own.")
    namespace: str | None = Field(
        None, max_length=200, description="Result namespace of the compiled graph (see Graph): "
        "results are shared only within one namespace. The gateway sets it to the tenant.")
    limits: RunLimits | None = Field(
        None, description="Bounds of the compiled graph while it runs (see Graph); a gateway "
        "sets the tenant's.")
    labels: Labels = Field(default_factory=dict)
    webhook: WebhookTarget | None = Field(
        default=None,
        description="POST the run's summary here when it ends (through a gateway)")
    priority: Priority | None = Field(default=None, description=PRIORITY)
    retention: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                    description=RETENTION)
    budget: int | None = Field(
        None, ge=1,
        description="Total denoising steps the loop may spend (sum over every image of its "
        "steps); later rounds are cut to fit. Needs steps. Compare loops with best-of-N at "
        "equal budget.")
    draft_candidates: int | None = Field(
        None, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="Round 1 makes this many cheap drafts instead of `candidates` images. "
        "Default with refiner 'draft': what budget leaves after the finishing rounds, else "
        "4 x candidates.")
    draft_steps: int | None = Field(
        None, ge=1, le=200,
        description="Denoising steps of a draft. Default with refiner 'draft': steps // 5 "
        "(at least 1), or 4 when steps is the model's default.")
    refine_timeout: float = Field(
        300.0, gt=0, le=3000, allow_inf_nan=False,
        description="Refiner 'agent': seconds each refine waits for the agent's answer "
        "(run.refine) before the fallback strategy decides.")
    fallback: str = Field(
        "seed-search", description="Refiner 'agent': the strategy used when no answer comes.")

    @model_validator(mode="after")
    def _plan(self) -> Loop:
        if self.budget is not None and self.steps is None:
            raise ValueError("a budget is counted in denoising steps: give steps too")
        if self.refiner == "draft":
            if self.draft_steps is None:
                self.draft_steps = max(1, self.steps // 5) if self.steps else 4
            if self.draft_candidates is None:
                self.draft_candidates = self._default_drafts()
        elif (self.draft_candidates is None) != (self.draft_steps is None):
            raise ValueError("give both draft_candidates and draft_steps, or neither")
        if self.give_up is not None and self.give_up.rounds >= self.rounds:
            raise ValueError(
                f"give_up.rounds ({self.give_up.rounds}) must be fewer than rounds "
                f"({self.rounds}): a loop gives up before its last round or never")
        if self.budget is not None and self._round_one_cost() > self.budget:
            raise ValueError(
                f"round 1 alone costs {self._round_one_cost()} denoising steps, over the "
                f"budget of {self.budget}; lower candidates, draft_candidates or steps"
            )
        return self

    def with_recipe(self, recipe: dict[str, Any] | None) -> Loop:
        """This loop with ``recipe`` (Loop fields: the back end's best measured loop for the
        model, published in its schema as ``served.recipes``) filled in, when the loop sets none
        of :data:`RECIPE_FIELDS`; else unchanged."""
        if not recipe or self.model_fields_set & RECIPE_FIELDS:
            return self
        return Loop.model_validate({**self.model_dump(include=self.model_fields_set), **recipe})

    def _default_drafts(self) -> int:
        if self.budget is None or self.steps is None or self.draft_steps is None:
            return min(4 * self.candidates, MAX_CANDIDATES_PER_NODE)
        finish = edit_steps(self.steps, finish_strength(self.steps))
        finishing = (self.rounds - 1) * self.candidates * finish
        return max(1, min((self.budget - finishing) // self.draft_steps,
                          MAX_CANDIDATES_PER_NODE))

    def _round_one_cost(self) -> int:
        if self.draft_candidates is not None and self.draft_steps is not None:
            return self.draft_candidates * self.draft_steps
        return self.candidates * (self.steps or 0)

    def compile(self) -> Graph:
        """The graph this loop runs as (see the module docstring)."""
        g = Graph(namespace=self.namespace, limits=self.limits, priority=self.priority,
                  retention=self.retention)
        image_opts: dict[str, Any] = {
            k: v
            for k, v in {
                "steps": self.steps, "guidance": self.guidance,
                "width": self.width, "height": self.height,
                # unset, the nodes stay as before the field existed (the same result keys)
                "cache": None if self.cache == "default" else self.cache,
                "reuse": None if self.reuse == "off" else self.reuse,
            }.items()
            if v is not None
        }
        retry: dict[str, Any] = (
            {"max_retries": self.max_retries} if self.max_retries is not None else {}
        )
        scores: list[str] = []
        refine: str | None = None
        for r in range(1, self.rounds + 1):
            if refine is None:
                first = dict(image_opts)
                n = self.candidates
                if self.draft_candidates is not None and self.draft_steps is not None:
                    first["steps"], n = self.draft_steps, self.draft_candidates
                gen = g.generate(
                    self.prompt, n=n, seed=self.seed, model=self.model,
                    id=f"round-{r}/generate", round=r, **first, **retry,
                )
            else:
                gen = g.generate(
                    model=self.model, inputs=[refine], map=True, id=f"round-{r}/generate",
                    round=r, **image_opts, **retry,
                )
            scores.append(
                g.score(gen, text=self.prompt, evaluator=self.evaluator, id=f"round-{r}/score",
                        **({"options": self.evaluator_options} if self.evaluator_options else {}),
                        **retry)
            )
            if r < self.rounds:
                refine = g.refine(
                    scores, prompt=self.prompt, candidates=self.candidates,
                    strategy=self.refiner, id=f"round-{r}/refine", round=r, target=self.target,
                    give_up=None if self.give_up is None else self.give_up.model_dump(),
                    keep=min(self.keep, self.candidates), min_success=1, steps=self.steps,
                    budget=self.budget, timeout=self.refine_timeout, fallback=self.fallback,
                    **retry,
                )
        return g
