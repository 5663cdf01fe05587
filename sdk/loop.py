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
from .ops import BACKEND_DEFAULT, MAX_CANDIDATES_PER_NODE


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
        "(CLIP-style: about 0-40); the remaining rounds are skipped and the run succeeds. "
        "Omit to always run every round.")
    evaluator: str | None = Field(
        None, description="Name of the evaluator that scores every image against the prompt. "
        + BACKEND_DEFAULT)
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
    max_retries: int | None = Field(
        None, ge=0, le=100, description="Retries of each node after a transient failure. Omit "
        "for each op's own.")
    namespace: str | None = Field(
        None, max_length=200, description="Result namespace of the compiled graph (see Graph): "
        "results are shared only within one namespace. The gateway sets it to the tenant.")

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
