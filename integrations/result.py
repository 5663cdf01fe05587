"""The structured result of a tool call: the fields a host or an application reads.

:class:`ToolResult` is what an MCP tool returns as ``structuredContent`` (its JSON schema is the
tool's ``outputSchema``), what the OpenAI Agents tools add as a JSON text output, and the base
of the LangChain artifact (:class:`~.outcome.ToolOutput`). A paused loop is recognisable from
these fields alone: ``done`` is false and ``refine`` is set. Nothing in it is large: no image
bytes, no embeddings, at most :data:`LISTED` candidates of a pause.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from genloop.sdk import Failure, RefineRequest, RunResult, RunStatus

#: Candidates a pause lists (best first); the images it returns are fewer.
LISTED = 12


class ImageRef(BaseModel):
    """An image a call shows: why it is shown, where to read it, how it scored."""

    label: str = Field(description="best, top 2, round 2 best ...")
    artifact: str = Field(description="artifact key (the MCP resource genloop://artifacts/{key})")
    score: float
    round: int
    seed: int
    prompt: str
    evaluator: str


class RoundBest(BaseModel):
    round: int
    best_score: float | None
    candidates: int


class PauseCandidate(BaseModel):
    """A candidate a paused loop shows, to keep, redraw or edit (``init_image``)."""

    artifact: str
    score: float
    seed: int
    round: int
    prompt: str
    weakest: str | None = Field(None, description="the clause a critic scored lowest")


class Pause(RefineRequest):
    """A loop paused for the agent (refiner 'agent'): the :class:`RefineRequest` with its best
    :data:`LISTED` candidates, each with only what an answer needs. Answer with refine_run."""

    scored: list[PauseCandidate] = Field(  # type: ignore[assignment]
        description="candidates so far, best first")

    @classmethod
    def of(cls, request: RefineRequest) -> Pause:
        shown = sorted(request.scored, key=lambda c: -c.score)[:LISTED]
        return cls(
            node_id=request.node_id, round=request.round, prompt=request.prompt,
            candidates=request.candidates, timeout=request.timeout, fallback=request.fallback,
            scored=[PauseCandidate(artifact=c.artifact, score=c.score, seed=c.seed,
                                   round=c.round, prompt=c.prompt,
                                   weakest=c.details.weakest if c.details else None)
                    for c in shown])


class ToolResult(BaseModel):
    """What one tool call found: the run, whether it is done, the best image, a pause."""

    done: bool = Field(description="false while the run works or is paused (see refine)")
    run_id: str | None = None
    status: RunStatus | None = None
    error: bool = Field(False, description="the call failed; the text says how to fix it")
    best: ImageRef | None = Field(None, description="the best image so far")
    images: list[ImageRef] = Field(default_factory=list,
                                   description="the images returned, in their order")
    rounds: list[RoundBest] = Field(default_factory=list, description="each round's best score")
    refine: Pause | None = Field(None, description="set while a loop waits for refine_run")
    failures: list[Failure] = Field(default_factory=list)


def output_schema() -> dict[str, Any]:
    """:class:`ToolResult`'s JSON schema without titles (the MCP tools' ``outputSchema``)."""
    return _untitled(ToolResult.model_json_schema())


def _untitled(node: Any) -> Any:
    if isinstance(node, list):
        return [_untitled(n) for n in node]
    if not isinstance(node, dict):
        return node
    return {k: _untitled(v) for k, v in node.items()
            if not (k == "title" and isinstance(v, str))}


def compact_result(result: RunResult) -> RunResult:
    """``result`` without image embeddings (most of a scored run's JSON: a 64-d CLIP embedding
    per candidate, of no use to a host or a model), nor the empty judge bill of a candidate a
    judge on the worker scored (``usage: null``)."""
    outputs = {
        node_id: out.model_copy(update={"items": [
            {k: v for k, v in item.items()
             if k != "embedding" and not (k == "usage" and v is None)}
            if isinstance(item, dict) else item for item in out.items]})
        for node_id, out in result.outputs.items()
    }
    return result.model_copy(update={"outputs": outputs})
