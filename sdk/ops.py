"""Parameter and output models of the built-in ops.

They live in the SDK (pydantic only) so an agent gets the same validation client side that the
workers apply, and so ``RunResult`` can hand back typed candidates.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

#: Largest ``n`` a single generate node may ask for.
MAX_CANDIDATES_PER_NODE = 256


#: How far the ``draft`` refiner's finish departs from its draft: img2img (SDEdit) from the
#: draft at this strength keeps the composition the judge ranked and sharpens it, as SDXL's
#: refiner polishes its base model's image. Regenerating the draft's seed at full steps instead
#: draws another picture: on the shapes model the finished image's verdict then agreed with its
#: draft's no better than chance (benchmarks/loop_quality.py reports the agreement).
DRAFT_FINISH_STRENGTH = 0.3


def edit_steps(steps: int, strength: float) -> int:
    """Denoising steps an img2img edit of ``steps`` at ``strength`` runs: diffusers rounds
    ``steps x strength`` down, and the engine runs at least one (a call that would run none
    fails in diffusers, so the engine raises its strength to one step's)."""
    return max(1, min(int(steps * strength), steps))


def finish_strength(steps: int) -> float:
    """The ``draft`` refiner's finishing strength at ``steps``: :data:`DRAFT_FINISH_STRENGTH`,
    raised where that would round to no step at all (1.5 / steps runs exactly one)."""
    return max(DRAFT_FINISH_STRENGTH, 1.5 / steps)


#: Step-cache modes a request may name; which of them a model runs depends on its architecture
#: (``genloop.workers.models.capabilities``).
CACHE_PATTERN = r"^(default|off|deepcache(:\d+)?|fbcache(:\d+(\.\d+)?)?|taylorseer)$"
CACHE_DESCRIPTION = (
    "Step caching, trading exactness for speed: 'default' (the model's own: DeepCache every 2 "
    "steps on UNets for calls of 8 steps or more, First-Block Cache on Flux, TaylorSeer on "
    "SD3), 'off' (exact), 'deepcache:N' (UNets), 'fbcache:T' (Flux), 'taylorseer' (SD3, "
    "Flux). A mode the model cannot run is refused. Leave at 'default' unless images must be "
    "bit-exact.")

#: Said once, used by every field that names a model or an evaluator.
BACKEND_DEFAULT = "Omit it (or null) for the back end's default; `genloop schema` lists the names."


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


Reuse = Literal["off", "auto"]
REUSE_DESCRIPTION = (
    "'auto': a text-to-image candidate may start from the stored intermediate latents of a "
    "similar earlier prompt drawn with the same seed, model, size, steps, guidance, cache "
    "mode and negative prompt (in this namespace), skipping its first steps (10% of them, at "
    "least 10 steps needed): faster, and slightly different from the 'off' image; each "
    "candidate records where it started (started_from). 'off': every image from its own "
    "noise, the same image on every run.")


class GenerateParams(_Params):
    """``generate``: ``n`` images for one prompt; candidate ``i`` uses seed ``seed + i``.

    A generate node that takes an input (``map=True`` over a refine node) reads its prompt and
    seed from each :class:`GenerationRequest` instead; ``prompt``, ``n`` and ``seed`` are ignored.
    With ``init_image`` the node edits that image (every candidate, each with its own seed),
    and with ``mask`` too it repaints the mask's white part; both keys are part of the result
    key, so an edit of another image is another result.
    """

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"prompt": "a large red circle in the centre, black background", "n": 8, "seed": 0},
        {"prompt": "a small blue square", "n": 4, "seed": 100, "model": "shapes", "steps": 20,
         "guidance": 4.0},
    ]})

    prompt: str | None = Field(
        None, description="What the image should show, in plain words. Required unless the "
        "node maps over a refine node (then each request brings its own prompt).")
    negative_prompt: str | None = Field(
        None, description="What the image should not show (classifier-free guidance pushes "
        "away from it). Usually left out.")
    n: int = Field(
        1, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="How many candidate images to generate, with seeds seed, seed+1, ... "
        "seed+n-1. Typical: 4-16. Cost grows linearly with n.")
    seed: int = Field(
        0, ge=0, lt=2**63,
        description="Seed of the first candidate. The same prompt, seed and settings always "
        "give the same image (and reuse the stored one).")
    model: str | None = Field(
        None, description="Name of the text-to-image model to run. " + BACKEND_DEFAULT)
    steps: int | None = Field(
        None, ge=1, le=200, description="Denoising steps: more is slower and usually "
        "sharper. Omit for the model's own default (typically 20-30).")
    guidance: float | None = Field(
        None, ge=0.0, le=50.0, description="Classifier-free guidance scale: how strongly the "
        "image follows the prompt. Omit for the model's own default (typically 4-8).")
    width: int | None = Field(
        None, ge=8, le=4096, multiple_of=8,
        description="Image width in pixels, a multiple of 8. Omit for the model's native size.")
    height: int | None = Field(
        None, ge=8, le=4096, multiple_of=8,
        description="Image height in pixels, a multiple of 8. Omit for the model's native size.")
    round: int = Field(
        1, ge=1, description="The loop round these candidates belong to (reporting only; "
        "a Loop sets it).")
    init_image: str | None = Field(
        None, description="Artifact key of an image to edit (img2img, SDEdit) instead of "
        "drawing from noise. Usually set by a refiner ('critic-edit', 'agent'), not by hand.")
    strength: float = Field(
        0.6, gt=0.0, le=1.0, allow_inf_nan=False,
        description="How far an edit departs from init_image: it is noised this far (1 = pure "
        "noise) and runs int(steps x strength) steps. Only used with init_image. Typical 0.3-0.8.")
    mask: str | None = Field(
        None, description="Artifact key of a mask for init_image (white: repaint, black: "
        "keep): inpainting. Only used with init_image.")
    cache: str = Field("default", pattern=CACHE_PATTERN, description=CACHE_DESCRIPTION)
    reuse: Reuse = Field("off", description=REUSE_DESCRIPTION)
    shard_size: int = Field(
        4, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="Candidates per worker message; each shard is retried and cached on its "
        "own. Leave at 4 unless tuning throughput.",
    )
    first: int = Field(
        0, ge=0, description="Index of the first candidate. Set by the scheduler on shards; "
        "leave at 0."
    )


class ScoreParams(_Params):
    """``score``: one score per input image, against ``text``."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"text": "a large red circle in the centre, black background"},
        {"text": "a small blue square", "evaluator": "shapes-clip"},
    ]})

    text: str = Field(
        min_length=1, description="The description each image is scored against, usually "
        "the generating prompt. Higher scores mean a closer match.")
    evaluator: str | None = Field(
        None, description="Name of the evaluator that scores the images (CLIP-style "
        "evaluators give 100 * cosine similarity, about 0-40). " + BACKEND_DEFAULT)
    options: dict[str, Any] | None = Field(
        None, description="Settings for the evaluator, part of the result key: 'brand-palette' "
        "takes {'palette': ['#e4002b', ...], 'max_distance': 20}; 'composite' takes "
        "{'weights': {'clip': 1, 'brand-palette': 0.2}, 'options': {'brand-palette': {...}}}. "
        "Usually left out.")

    @model_serializer(mode="wrap")
    def _omit_unset_options(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without options the dump (and so every result key made from it) stays what it was
        # before options existed: stored scores keep being reused.
        data = handler(self)
        if data.get("options") is None:
            data.pop("options", None)
        return data


class SelectParams(_Params):
    """``select``: keep the ``top_k`` best-scored candidates (highest first)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"top_k": 2},
        {"top_k": 4, "strategy": "top-k-diverse", "diversity": 0.3},
        {"top_k": 8, "strategy": "threshold", "threshold": 25.0},
    ]})

    top_k: int = Field(
        1, ge=1, description="How many candidates to keep, best first (at most this many "
        "with 'threshold').")
    strategy: Literal["top-k", "threshold", "top-k-diverse"] = Field(
        "top-k", description="'top-k': the top_k highest scores. 'threshold': those scoring "
        "at least `threshold`, best first, at most top_k. 'top-k-diverse': top_k picked for "
        "score and mutual difference (maximal marginal relevance).")
    threshold: float | None = Field(
        None, description="Lowest score kept, on the evaluator's scale; only with "
        "strategy='threshold'.")
    diversity: float = Field(
        0.5, ge=0.0, le=1.0, description="For 'top-k-diverse': 0 = by score only, 1 = by "
        "difference only. Typical 0.3-0.5.")


class GiveUp(_Params):
    """Stop a loop that no score has brought to ``below`` after ``rounds`` rounds: the prompt is
    one the model rarely draws right, and its remaining budget would most likely buy nothing
    (``benchmarks/stop_rules.py`` measured this on shapes: docs/judges.md). The best image so
    far is kept and the run succeeds."""

    rounds: int = Field(ge=1, le=50, description="Rounds the loop gets before giving up.")
    below: float = Field(
        allow_inf_nan=False, description="The score (on the evaluator's scale) some image must "
        "have reached by then for the loop to go on.")


class RefineParams(_Params):
    """``refine``: turn the scored candidates seen so far into the next round's requests."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"prompt": "a large red circle in the centre, black background", "candidates": 8,
         "round": 1, "keep": 2},
        {"prompt": "a small blue square", "strategy": "prompt-variants", "candidates": 4,
         "round": 2, "target": 30.0},
    ]})

    strategy: str = Field(
        "seed-search", description="Name of the refiner that proposes the next round: "
        "'seed-search' (new seeds around the best ones) is the usual choice; `genloop schema` "
        "lists the names this back end serves.")
    prompt: str = Field(min_length=1, description="The loop's prompt, which the refiner "
                        "starts from.")
    candidates: int = Field(
        8, ge=1, le=MAX_CANDIDATES_PER_NODE,
        description="How many generation requests to emit for the next round.")
    round: int = Field(1, ge=1, description="The round just scored; the requests are for "
                       "round + 1.")
    target: float | None = Field(
        None, description="Stop the loop once any score reaches this (on the evaluator's "
        "scale): the following rounds are skipped and the run succeeds.")
    give_up: GiveUp | None = Field(
        None, description="Stop the loop after `give_up.rounds` rounds if no score has reached "
        "`give_up.below` by then, keeping the best so far; omit to go on.")
    keep: int = Field(
        2, ge=1, description="How many of the best candidates seed the next round. 1 "
        "exploits, larger explores. Typical 1-4, at most `candidates`.")
    steps: int | None = Field(
        None, ge=1, le=200,
        description="Denoising steps of a full-quality image in the next round; needed to plan "
        "within budget.")
    budget: int | None = Field(
        None, ge=1,
        description="Total denoising steps the loop may spend; the next round is cut to what "
        "is left, and the loop halts when nothing is.")
    timeout: float = Field(
        300.0, gt=0, le=3000, allow_inf_nan=False,
        description="Strategy 'agent': seconds to wait for the agent's answer before falling "
        "back.")
    fallback: str = Field(
        "seed-search", description="Strategy 'agent': the strategy used when no answer comes.")
    rewriter: str = Field(
        "rules", description="Strategy 'prompt-history': the registered PromptRewriter.")


class LatentStart(BaseModel):
    """Where a ``reuse='auto'`` image started: after ``step`` denoising steps of ``prompt``'s
    image of the same seed, whose text embedding is ``similarity`` (cosine) from its own."""

    prompt: str
    step: int = Field(ge=1)
    similarity: float


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
    started_from: LatentStart | None = Field(
        None, description="the stored latents this image started from (reuse='auto'); None: "
        "from its own noise")

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


class JudgeUsage(BaseModel):
    """What a hosted judge (``vlm-judge``) was billed for: requests sent (retries included)
    and the tokens its replies reported. Judges that run on the worker spend none."""

    calls: int = Field(0, ge=0, description="HTTP requests sent, retries included")
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)

    def __add__(self, other: JudgeUsage) -> JudgeUsage:
        return JudgeUsage(calls=self.calls + other.calls,
                          prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                          completion_tokens=self.completion_tokens + other.completion_tokens)


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
    usage: JudgeUsage | None = Field(
        None, description="what a hosted judge was billed for scoring this image (questions "
        "it answered from its cache cost nothing); None for judges that run on the worker"
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
