"""Parameter and output models of the built-in ops.

They live in the SDK (pydantic only) so an agent gets the same validation client side that the
workers apply, and so ``RunResult`` can hand back typed candidates.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: Largest ``n`` a single generate node may ask for.
MAX_CANDIDATES_PER_NODE = 256


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerateParams(_Params):
    """``generate``: ``n`` images for one prompt; candidate ``i`` uses seed ``seed + i``.

    A generate node that takes an input (``map=True`` over a refine node) reads its prompt and
    seed from each :class:`GenerationRequest` instead; ``prompt``, ``n`` and ``seed`` are ignored.
    With ``init_image`` the node edits that image (every candidate, each with its own seed),
    and with ``mask`` too it repaints the mask's white part; both keys are part of the result
    key, so an edit of another image is another result.
    """

    prompt: str | None = None
    negative_prompt: str | None = None
    n: int = Field(1, ge=1, le=MAX_CANDIDATES_PER_NODE)
    seed: int = Field(0, ge=0, lt=2**63)
    model: str = "tiny"
    steps: int | None = Field(None, ge=1, le=200, description="default: the model's own")
    guidance: float | None = Field(None, ge=0.0, le=50.0, description="default: the model's own")
    width: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    height: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    round: int = Field(1, ge=1, description="loop round the candidates belong to")
    init_image: str | None = Field(
        None, description="artifact key of an image to edit (img2img, SDEdit) instead of "
        "drawing from noise",
    )
    strength: float = Field(
        0.6, gt=0.0, le=1.0,
        description="how far an edit departs from init_image: it is noised this far (1 = "
        "pure noise) and runs int(steps x strength) steps",
    )
    mask: str | None = Field(
        None, description="artifact key of a mask for init_image (white: repaint, black: "
        "keep); inpainting",
    )
    cache: str = Field(
        "default",
        pattern=r"^(default|off|deepcache(:\d+)?|fbcache(:\d+(\.\d+)?)?|taylorseer)$",
        description="step caching: 'default' (DeepCache every 2 steps on UNets, First-Block "
        "Cache on transformers), 'off' (exact), 'deepcache:N', 'fbcache:T', 'taylorseer'",
    )
    shard_size: int = Field(
        4, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="candidates per message; each shard is retried and cached on its own",
    )
    first: int = Field(
        0, ge=0, description="index of the first candidate; set by the scheduler on shards"
    )


class ScoreParams(_Params):
    """``score``: one score per input image, against ``text``."""

    text: str = Field(min_length=1)
    evaluator: str = "clip"


class SelectParams(_Params):
    """``select``: keep the ``top_k`` best-scored candidates (highest first)."""

    top_k: int = Field(1, ge=1)
    strategy: Literal["top-k", "threshold", "top-k-diverse"] = "top-k"
    threshold: float | None = None
    diversity: float = Field(0.5, ge=0.0, le=1.0, description="MMR trade-off for top-k-diverse")


class RefineParams(_Params):
    """``refine``: turn the scored candidates seen so far into the next round's requests."""

    strategy: str = "seed-search"
    prompt: str = Field(min_length=1)
    candidates: int = Field(8, ge=1, le=MAX_CANDIDATES_PER_NODE)
    round: int = Field(1, ge=1, description="the round just scored; requests are for round + 1")
    target: float | None = Field(None, description="halt the loop once a score reaches this")
    keep: int = Field(2, ge=1, description="how many of the best candidates seed the next round")
    steps: int | None = Field(
        None, ge=1, le=200,
        description="denoising steps of a full-quality image in the next round; needed to plan "
        "within budget",
    )
    budget: int | None = Field(
        None, ge=1,
        description="total denoising steps the loop may spend; the next round is cut to what "
        "is left, and the loop halts when nothing is",
    )
    timeout: float = Field(
        300.0, gt=0, le=3000,
        description="strategy 'agent': seconds to wait for the agent's answer before falling "
        "back",
    )
    fallback: str = Field(
        "seed-search", description="strategy 'agent': the strategy used when no answer comes"
    )
    rewriter: str = Field(
        "rules", description="strategy 'prompt-history': the registered PromptRewriter"
    )


class Candidate(BaseModel):
    """One generated image."""

    index: int = Field(description="position among the node's candidates (seed order)")
    prompt: str
    seed: int
    round: int = 1
    model: str
    artifact: str = Field(description="artifact key; read it with client.read_artifact")
    width: int
    height: int
    steps: int
    denoised_steps: int | None = Field(
        None, ge=0,
        description="denoising steps this image actually ran (an edit runs steps x strength); "
        "None means all of steps",
    )
    init_image: str | None = Field(None, description="artifact key of the image this one edits")
    mask: str | None = Field(None, description="artifact key of the inpainting mask")
    strength: float | None = Field(None, description="edit strength (None: not an edit)")

    @property
    def cost(self) -> int:
        """Denoising steps this image cost: what compute accounting adds up."""
        return self.steps if self.denoised_steps is None else self.denoised_steps


class ClauseScore(BaseModel):
    """How well an image shows one clause of its prompt, as a critic judged it."""

    clause: str = Field(description="what the clause is about: 'colour', 'shape', or the "
                        "clause's own text for free prompts")
    text: str = Field(description="the clause's words in the prompt, e.g. 'red'")
    score: float = Field(description="0-100; for shapes prompts, the probability (x100) that "
                         "the image shows this clause rather than one of its alternatives")


class Critique(BaseModel):
    """A critic's per-clause view of one image; ``weakest`` names the clause to fix first."""

    clauses: list[ClauseScore] = Field(description="one entry per clause, in prompt order")
    weakest: str | None = Field(None, description="the clause with the lowest score")


class ScoredCandidate(Candidate):
    """A candidate with its evaluator score (``100 * max(cos, 0)`` for CLIP evaluators)."""

    score: float
    evaluator: str
    embedding: list[float] | None = Field(
        None, repr=False, description="image embedding the score came from; reused for diversity"
    )
    details: Critique | None = Field(
        None, description="per-clause scores, from critic evaluators (clause-critic)"
    )


class GenerationRequest(BaseModel):
    """One image to generate in the next round, produced by ``refine``."""

    prompt: str
    seed: int = Field(ge=0)
    round: int = Field(ge=1)
    steps: int | None = Field(
        None, ge=1, le=200,
        description="denoising steps for this image; None: the generate node's own (a draft "
        "refiner finishes drafts at full steps this way)",
    )
    reason: str | None = Field(
        None, description="why the refiner asked for this image (which clause, which parent)"
    )
    init_image: str | None = Field(
        None, description="artifact key of an image to edit (img2img, SDEdit) instead of "
        "drawing from noise",
    )
    strength: float | None = Field(
        None, gt=0.0, le=1.0,
        description="how far an edit departs from init_image: it is noised this far (1 = "
        "pure noise); None: the generate node's",
    )
    mask: str | None = Field(
        None, description="artifact key of a mask for init_image (white: repaint, black: "
        "keep); inpainting",
    )


class RefineRequest(BaseModel):
    """What a loop paused for an agent shows it (the ``refine.requested`` event's message):
    the scored candidates so far, with their critiques and artifact keys, never a checker's
    verdict. Answer with ``run.refine(...)`` or ``POST /v1/runs/{id}/refine``."""

    node_id: str = Field(description="the refine node waiting; name it in the answer")
    round: int = Field(description="the round just scored; answers are for round + 1")
    prompt: str
    candidates: int = Field(description="how many images the next round may have")
    timeout: float = Field(description="seconds the loop waits before it falls back")
    fallback: str = Field(description="the strategy it falls back to")
    scored: list[ScoredCandidate] = Field(description="every candidate so far (no embeddings)")


class RefineAnswer(BaseModel):
    """An agent's answer to ``refine.requested``: the next round's images.

    Only one answer counts: a second one (or one after the timeout) is refused with
    :class:`~genloop.sdk.errors.RefineConflict` (HTTP 409)."""

    model_config = ConfigDict(extra="forbid")

    node_id: str | None = Field(
        None, description="the refine node answered; None: the one waiting now"
    )
    requests: list[GenerationRequest] = Field(
        min_length=1, max_length=MAX_CANDIDATES_PER_NODE,
        description="the images to make next (prompts, seeds, edits of artifact keys); "
        "their round is set by the loop",
    )


#: The parameter model of each built-in op, by op name.
BUILTIN_PARAMS: dict[str, type[BaseModel]] = {
    "generate": GenerateParams,
    "score": ScoreParams,
    "select": SelectParams,
    "refine": RefineParams,
}

#: The item model each built-in op outputs, by op name.
BUILTIN_OUTPUTS: dict[str, type[BaseModel]] = {
    "generate": Candidate,
    "score": ScoredCandidate,
    "select": ScoredCandidate,
    "refine": GenerationRequest,
}
