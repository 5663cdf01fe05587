"""Loops: generate -> score -> refine, round after round, as one submission.

A :class:`Loop` compiles to a plain :class:`~genloop.sdk.graph.Graph` with its rounds unrolled::

    round-1/generate  (n = candidates, seeds seed .. seed + candidates - 1)
    round-1/score     (against the loop's prompt)
    round-1/refine    (inputs: every score node so far; outputs the next round's requests)
    round-2/generate  (map=True over round-1/refine: one image per request)
    round-2/score
    ...
    round-R/score     (the last round has no refine)

The stop guard is the refine op: when a score reaches ``target`` it halts, and every node
downstream of it is skipped, so the run ends early and succeeds. Each refine tolerates failed
candidates (``min_success=1``): one broken image never breaks the loop.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .graph import Graph
from .ops import MAX_CANDIDATES_PER_NODE


class Loop(BaseModel):
    """A generate -> evaluate -> refine loop over ``rounds`` rounds of ``candidates`` images."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["loop"] = "loop"
    prompt: str = Field(min_length=1)
    candidates: int = Field(8, ge=1, le=MAX_CANDIDATES_PER_NODE)
    rounds: int = Field(3, ge=1, le=50)
    target: float | None = Field(None, allow_inf_nan=False,
                                 description="stop early once a score reaches this")
    evaluator: str = "clip"
    refiner: str = "seed-search"
    model: str = "tiny"
    seed: int = Field(0, ge=0)
    keep: int = Field(2, ge=1, description="best candidates that seed the next round")
    steps: int | None = Field(None, ge=1, le=200)
    guidance: float | None = Field(None, ge=0.0, le=50.0, allow_inf_nan=False)
    width: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    height: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    max_retries: int | None = Field(None, ge=0, le=100)
    namespace: str | None = Field(
        None, max_length=200, description="result namespace of the compiled graph (see Graph)"
    )

    def compile(self) -> Graph:
        """The graph this loop runs as (see the module docstring)."""
        g = Graph(namespace=self.namespace)
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
                gen = g.generate(
                    self.prompt, n=self.candidates, seed=self.seed, model=self.model,
                    id=f"round-{r}/generate", round=r, **image_opts, **retry,
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
                    keep=min(self.keep, self.candidates), min_success=1, **retry,
                )
        return g
