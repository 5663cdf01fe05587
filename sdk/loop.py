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

With ``refiner="agent"`` each refine pauses: the run emits ``refine.requested`` (a
:class:`~genloop.sdk.ops.RefineRequest` as its message) and waits up to ``refine_timeout`` s for
``run.refine(...)``, then lets ``fallback`` decide.

The stop guard is the refine op: when a score reaches ``target``, or the denoising-step
``budget`` has nothing left for another image, it halts, and every node downstream of it is
skipped, so the run ends early and succeeds. Each refine tolerates failed
candidates (``min_success=1``): one broken image never breaks the loop.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .graph import Graph
from .ops import MAX_CANDIDATES_PER_NODE


class Loop(BaseModel):
    """A generate -> evaluate -> refine loop over ``rounds`` rounds of ``candidates`` images."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["loop"] = "loop"
    prompt: str = Field(min_length=1)
    candidates: int = Field(8, ge=1, le=MAX_CANDIDATES_PER_NODE)
    rounds: int = Field(3, ge=1, le=50)
    target: float | None = Field(None, description="stop early once a score reaches this")
    evaluator: str = "clip"
    refiner: str = "seed-search"
    model: str = "tiny"
    seed: int = Field(0, ge=0)
    keep: int = Field(2, ge=1, description="best candidates that seed the next round")
    steps: int | None = Field(None, ge=1, le=200)
    guidance: float | None = Field(None, ge=0.0, le=50.0)
    width: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    height: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    max_retries: int | None = Field(None, ge=0, le=100)
    budget: int | None = Field(
        None, ge=1,
        description="total denoising steps the loop may spend (sum over every image of its "
        "steps); later rounds are cut to fit. Needs steps. Compare loops with best-of-N at "
        "equal budget",
    )
    draft_candidates: int | None = Field(
        None, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="round 1 makes this many cheap drafts instead of candidates images. "
        "Default with refiner 'draft': what budget leaves after the finishing rounds, else "
        "4 x candidates",
    )
    draft_steps: int | None = Field(
        None, ge=1, le=200,
        description="denoising steps of a draft. Default with refiner 'draft': steps // 4 "
        "(at least 1), or 5 when steps is the model's default",
    )

    refine_timeout: float = Field(
        300.0, gt=0, le=3000,
        description="refiner 'agent': seconds each refine waits for the agent's answer "
        "(run.refine) before the fallback strategy decides",
    )
    fallback: str = Field(
        "seed-search", description="refiner 'agent': the strategy used when no answer comes"
    )

    @model_validator(mode="after")
    def _plan(self) -> Loop:
        if self.budget is not None and self.steps is None:
            raise ValueError("a budget is counted in denoising steps: give steps too")
        if self.refiner == "draft":
            if self.draft_steps is None:
                self.draft_steps = max(1, self.steps // 4) if self.steps else 5
            if self.draft_candidates is None:
                self.draft_candidates = self._default_drafts()
        elif (self.draft_candidates is None) != (self.draft_steps is None):
            raise ValueError("give both draft_candidates and draft_steps, or neither")
        if self.budget is not None and self._round_one_cost() > self.budget:
            raise ValueError(
                f"round 1 alone costs {self._round_one_cost()} denoising steps, over the "
                f"budget of {self.budget}; lower candidates, draft_candidates or steps"
            )
        return self

    def _default_drafts(self) -> int:
        if self.budget is None or self.steps is None or self.draft_steps is None:
            return min(4 * self.candidates, MAX_CANDIDATES_PER_NODE)
        finishing = (self.rounds - 1) * self.candidates * self.steps
        return max(1, min((self.budget - finishing) // self.draft_steps,
                          MAX_CANDIDATES_PER_NODE))

    def _round_one_cost(self) -> int:
        if self.draft_candidates is not None and self.draft_steps is not None:
            return self.draft_candidates * self.draft_steps
        return self.candidates * (self.steps or 0)

    def compile(self) -> Graph:
        """The graph this loop runs as (see the module docstring)."""
        g = Graph()
        image_opts: dict[str, Any] = {
            k: v
            for k, v in {
                "steps": self.steps, "guidance": self.guidance,
                "width": self.width, "height": self.height,
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
                        **retry)
            )
            if r < self.rounds:
                refine = g.refine(
                    scores, prompt=self.prompt, candidates=self.candidates,
                    strategy=self.refiner, id=f"round-{r}/refine", round=r, target=self.target,
                    keep=min(self.keep, self.candidates), min_success=1, steps=self.steps,
                    budget=self.budget, timeout=self.refine_timeout, fallback=self.fallback,
                    **retry,
                )
        return g
