"""``generate``: images from a text-to-image pipeline of the model registry."""

from __future__ import annotations

from dataclasses import replace

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import Candidate, GenerateParams, GenerationRequest

from ..context import OpContext
from .registry import op


def _identity(params: GenerateParams, resources) -> str:
    return resources.models.identity(params.model)


# version 2: the engine's default step cache (DeepCache) changes pixels slightly (see
# genloop.workers.engine.step_cache), so results stored by version 1 are not reused.
@op("generate", params=GenerateParams, output=Candidate, queue="gpu", identity=_identity,
    version="2")
def generate(params: GenerateParams, inputs: list, ctx: OpContext) -> list[Candidate]:
    """Candidates ``first .. first + n - 1`` of the node (seed ``seed + i`` each); or, on a
    mapped node, the one image its :class:`GenerationRequest` input asks for.

    The shard goes to the process's generation engine, which may run it in one batched call
    with other shards of the same model and settings (see ``genloop.workers.engine``).
    Progress is reported per step (throttled by ``ctx``), and a cancelled run stops the shard
    between two denoising steps, or while it waits for its batch.
    """
    from ..engine.generate import ImageSettings, png_bytes

    if inputs:
        requests = [GenerationRequest.model_validate(i, from_attributes=True) for i in inputs]
    elif params.prompt:
        requests = [
            GenerationRequest(prompt=params.prompt, seed=params.seed + i, round=params.round)
            for i in range(params.n)
        ]
    else:
        raise Permanent("generate needs a prompt (or a refine node as its input)")

    models = ctx.resources.models
    defaults = models.defaults(params.model)
    base = ImageSettings(
        steps=params.steps or defaults.steps,
        guidance=defaults.guidance if params.guidance is None else params.guidance,
        width=params.width or defaults.width,
        height=params.height or defaults.height,
        negative_prompt=params.negative_prompt,
        cache=params.cache,
    )
    settings = [replace(base, steps=r.steps) if r.steps else base for r in requests]

    def on_step(done: int, total: int) -> None:
        ctx.check_cancelled()
        ctx.progress(done, total)

    # Requests that share settings go to the engine as one request (one batch); a refiner
    # that mixes drafts and finished images makes more than one group.
    groups: dict[ImageSettings, list[int]] = {}
    for i, s in enumerate(settings):
        groups.setdefault(s, []).append(i)
    images: list = [None] * len(requests)
    for group_settings, members in groups.items():
        made = models.engine.generate(
            params.model, [requests[i].prompt for i in members],
            [requests[i].seed for i in members], group_settings,
            on_step=on_step, check=ctx.check_cancelled,
        )
        for i, img in zip(members, made, strict=True):
            images[i] = img
    return [
        Candidate(
            index=params.first + i, prompt=r.prompt, seed=r.seed, round=r.round,
            model=params.model, artifact=ctx.artifacts.put(png_bytes(img), "png"),
            width=s.width, height=s.height, steps=s.steps,
        )
        for i, (r, s, img) in enumerate(zip(requests, settings, images, strict=True))
    ]
