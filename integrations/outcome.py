"""What a tool call hands back, for every framework: text for the model, images, the run.

:class:`ToolOutput` is framework-neutral; each adapter turns it into its own shape (a LangChain
``content_and_artifact`` pair, MCP text and image content, OpenAI Agents tool outputs). The
text alone must let a model decide what to do next: what was made, the scores, and for a run
that is not done, its id and the call that continues it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from genloop.sdk import Failure, RefineRequest, RunInfo, RunResult, RunStatus, ScoredCandidate


class ToolImage(BaseModel):
    """One image a tool returns, with where it came from and how it scored."""

    artifact: str = Field(description="artifact key; read it again with the client")
    png: bytes = Field(repr=False, exclude=True, description="the PNG file")
    score: float
    evaluator: str
    prompt: str
    seed: int
    round: int
    label: str = Field(description="why this image is here: best, round 2 best, top 3 ...")


class RoundBest(BaseModel):
    round: int
    best_score: float | None
    candidates: int


class ToolOutput(BaseModel):
    """The outcome of one tool call."""

    text: str = Field(description="what to tell the model")
    run_id: str | None = None
    status: RunStatus | None = None
    done: bool = Field(True, description="false while the run still works: poll with get_run")
    error: bool = Field(False, description="the call failed; text says why and how to fix it")
    images: list[ToolImage] = Field(default_factory=list)
    rounds: list[RoundBest] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    refine: RefineRequest | None = Field(None, description=(
        "the loop is paused for the agent's refinement: answer with refine_run"))


def pending(info: RunInfo, waited: float) -> ToolOutput:
    """A run that did not end within the call's wait: its id and what to do next."""
    return ToolOutput(
        text=(f"Run {info.id} is still {info.status.value} after {waited:g}s. "
              f"Call get_run with run_id={info.id!r} to wait for it, or cancel_run to stop it."),
        run_id=info.id, status=info.status, done=False,
    )


def awaiting_refine(info: RunInfo, request: RefineRequest,
                    images: list[ToolImage]) -> ToolOutput:
    """A loop paused for the agent: the candidates so far, best first, and how to answer."""
    lines = [
        f"Run {info.id} is paused after round {request.round}, waiting for you to choose round "
        f"{request.round + 1}'s images (refine node {request.node_id!r}). If you have not "
        f"answered within {request.timeout:g}s of the pause, it falls back to "
        f"'{request.fallback}'.",
        f"Prompt: {request.prompt!r}. Candidates so far, best first:",
    ]
    for c in ranked(request.scored)[:_LISTED]:
        line = (f"- {c.artifact}: score {c.score:.2f}, seed {c.seed}, round {c.round}, "
                f"prompt {c.prompt!r}")
        if c.details is not None and c.details.weakest:
            line += f"; weakest clause: {c.details.weakest!r}"
        lines.append(line)
    lines.append(
        f"Call refine_run with run_id={info.id!r} and up to {request.candidates} requests, each "
        "a prompt and a seed; to edit a candidate instead of drawing anew, give its artifact key "
        "as init_image (and a strength below 1 to keep its layout).")
    return ToolOutput(text="\n".join(lines), run_id=info.id, status=info.status, done=False,
                      images=images, refine=request)


#: Candidates a paused loop lists in its text (the images returned are fewer).
_LISTED = 12


def ranked(scored: list[ScoredCandidate]) -> list[ScoredCandidate]:
    """Best first; ties keep their order."""
    return sorted(scored, key=lambda c: -c.score)


def cancelled(info: RunInfo) -> ToolOutput:
    return ToolOutput(
        text=f"Run {info.id} is {info.status.value}; its running work stops shortly.",
        run_id=info.id, status=info.status, done=info.status.terminal,
    )


def chosen(result: RunResult, limit: int) -> list[tuple[str, ScoredCandidate]]:
    """The images worth showing, best first: a select node's picks if the run has one, else the
    best overall followed by each earlier round's best (a loop's story), at most ``limit``."""
    picks = [c for nid, out in result.outputs.items() if out.op == "select"
             for c in result.items(nid)]
    if picks:
        ranked = sorted(picks, key=lambda c: -c.score)
        return [("best" if i == 0 else f"top {i + 1}", c) for i, c in enumerate(ranked[:limit])]
    best = result.best
    if best is None:
        return []
    out = [("best", best)]
    for summary in result.rounds:
        if len(out) >= limit:
            break
        if summary.best is not None and summary.best.artifact != best.artifact:
            out.append((f"round {summary.round} best", summary.best))
    return out


def describe(result: RunResult, images: list[ToolImage]) -> ToolOutput:
    """A run's result as a tool output; ``images`` are those :func:`chosen` picked, read."""
    rounds = [RoundBest(round=r.round, best_score=r.best_score, candidates=len(r.candidates))
              for r in result.rounds]
    lines = [f"Run {result.run_id} {result.status.value}."]
    if images:
        lines += [f"- {im.label}: score {im.score:.2f} ({im.evaluator}), seed {im.seed}, "
                  f"round {im.round}, prompt {im.prompt!r}" for im in images]
    else:
        lines.append("It produced no scored images.")
    if len(rounds) > 1:
        lines.append("Best score per round: " + ", ".join(
            f"{r.round}: {'-' if r.best_score is None else f'{r.best_score:.2f}'}"
            for r in rounds))
    if result.failures:
        lines.append(f"{len(result.failures)} item(s) failed:")
        lines += [f"- {f.node_id}: {f.error_type}: {f.message}" for f in result.failures[:5]]
    if result.error:
        lines.append(f"Error: {result.error}")
    return ToolOutput(
        text="\n".join(lines), run_id=result.run_id, status=result.status,
        done=result.status.terminal, images=images, rounds=rounds, failures=result.failures,
    )
