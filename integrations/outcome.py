"""What a tool call hands back, for every framework: text for the model, images, the run.

:class:`ToolOutput` is the :class:`~.result.ToolResult` plus the text and the PNG bytes; each
adapter turns it into its own shape (a LangChain ``content_and_artifact`` pair, MCP content
with ``structuredContent``, OpenAI Agents tool outputs). The text alone must let a model decide
what to do next: what was made (each image by label and artifact key, in the order the images
follow), the scores, and for a run that is not done, its id and the call that continues it.
"""

from __future__ import annotations

from pydantic import Field

from genloop.sdk import RefineRequest, RunInfo, RunResult, ScoredCandidate

from .result import ImageRef, Pause, RoundBest, ToolResult


class ToolImage(ImageRef):
    """One image a tool returns: its :class:`~.result.ImageRef` and the PNG file."""

    png: bytes = Field(repr=False, exclude=True, description="the PNG file")


class ToolOutput(ToolResult):
    """The outcome of one tool call."""

    text: str = Field(description="what to tell the model")
    images: list[ToolImage] = Field(default_factory=list)  # type: ignore[assignment]

    def structured(self) -> ToolResult:
        """The fields without the text and the image bytes (MCP's ``structuredContent``)."""
        return ToolResult.model_validate(self.model_dump(exclude={"text"}))


def pending(info: RunInfo, waited: float) -> ToolOutput:
    """A run that did not end within the call's wait: its id and what to do next."""
    return ToolOutput(
        text=(f"Run {info.id} is still {info.status.value} after {waited:g}s (done: false). "
              f"Call get_run with run_id={info.id!r} to wait for it, or cancel_run to stop it."),
        run_id=info.id, status=info.status, done=False,
    )


def awaiting_refine(info: RunInfo, request: RefineRequest,
                    images: list[ToolImage]) -> ToolOutput:
    """A loop paused for the agent: the candidates so far, best first, and how to answer."""
    pause = Pause.of(request)
    lines = [
        f"Run {info.id} is paused after round {request.round} (done: false), waiting for you to "
        f"choose round {request.round + 1}'s images (refine node {request.node_id!r}). If you "
        f"have not answered within {request.timeout:g}s of the pause, it falls back to "
        f"'{request.fallback}'.",
        f"Prompt: {request.prompt!r}. Candidates so far, best first:",
    ]
    for c in pause.scored:
        line = (f"- {c.artifact}: score {c.score:.2f}, seed {c.seed}, round {c.round}, "
                f"prompt {c.prompt!r}")
        if c.weakest:
            line += f"; weakest clause: {c.weakest!r}"
        lines.append(line)
    if images:
        lines.append(f"The first {len(images)} are attached as images, labelled "
                     f"{', '.join(im.label for im in images)}.")
    lines.append(
        f"Call refine_run with run_id={info.id!r} and up to {request.candidates} requests, each "
        "a prompt and a seed; to edit a candidate instead of drawing anew, give its artifact key "
        "as init_image (and a strength below 1 to keep its layout).")
    return ToolOutput(text="\n".join(lines), run_id=info.id, status=info.status, done=False,
                      images=images, best=_best(images), refine=pause)


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
        lines[0] += " Images attached, in this order:"
        lines += [f"- {im.label}: {im.artifact}, score {im.score:.2f} ({im.evaluator}), seed "
                  f"{im.seed}, round {im.round}, prompt {im.prompt!r}" for im in images]
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
        done=result.status.terminal, images=images, best=_best(images), rounds=rounds,
        failures=result.failures,
    )


def _best(images: list[ToolImage]) -> ImageRef | None:
    """Images are ordered best first, so the first is the best (without its bytes)."""
    return ImageRef.model_validate(images[0].model_dump()) if images else None
