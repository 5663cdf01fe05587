"""Parameter and output models of the built-in ops.

They live in the SDK (pydantic only) so an agent gets the same validation client side that the
workers apply, and so ``RunResult`` can hand back typed candidates.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: Largest ``n`` a single generate node may ask for.
MAX_CANDIDATES_PER_NODE = 256


#: Said once, used by every field that names a model or an evaluator.
BACKEND_DEFAULT = "Omit it (or null) for the back end's default; `genloop schema` lists the names."


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerateParams(_Params):
    """``generate``: ``n`` images for one prompt; candidate ``i`` uses seed ``seed + i``.

    A generate node that takes an input (``map=True`` over a refine node) reads its prompt and
    seed from each :class:`GenerationRequest` instead; ``prompt``, ``n`` and ``seed`` are ignored.
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
    cache: str = Field(
        "default",
        pattern=r"^(default|off|deepcache(:\d+)?|fbcache(:\d+(\.\d+)?)?|taylorseer)$",
        description="Step caching, trading exactness for speed: 'default' (DeepCache every 2 "
        "steps on UNets, First-Block Cache on transformers), 'off' (exact), 'deepcache:N', "
        "'fbcache:T', 'taylorseer'. Leave at 'default' unless images must be bit-exact.",
    )
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
    keep: int = Field(
        2, ge=1, description="How many of the best candidates seed the next round. 1 "
        "exploits, larger explores. Typical 1-4, at most `candidates`.")


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


class ScoredCandidate(Candidate):
    """A candidate with its evaluator score (``100 * max(cos, 0)`` for CLIP evaluators)."""

    score: float
    evaluator: str
    embedding: list[float] | None = Field(
        None, repr=False, description="image embedding the score came from; reused for diversity"
    )


class GenerationRequest(BaseModel):
    """One image to generate in the next round, produced by ``refine``."""

    prompt: str
    seed: int = Field(ge=0)
    round: int = Field(ge=1)


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
