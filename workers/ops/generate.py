"""``generate``: images from a text-to-image pipeline of the model registry."""

from __future__ import annotations

from genloop.sdk.errors import Permanent
from genloop.sdk.ops import MAX_CANDIDATES_PER_NODE, Candidate, GenerateParams, GenerationRequest

from ..context import OpContext
from ..deferred import Deferred
from .registry import op


def _identity(params: GenerateParams, resources) -> str:
    return resources.models.identity(params.model)


# version 2: the engine's default step cache (DeepCache) changes pixels slightly (see
# genloop.workers.engine.step_cache), so results stored by version 1 are not reused.
@op("generate", params=GenerateParams, output=Candidate, queue="gpu", identity=_identity,
    version="2")
def generate(params: GenerateParams, inputs: list, ctx: OpContext) -> Deferred:
    """Candidates ``first .. first + n - 1`` of the node (seed ``seed + i`` each); or, on a
    mapped node, the one image its :class:`GenerationRequest` input asks for.

    The shard goes to the process's generation engine, which may run it in one batched call
    with other shards of the same model and settings (see ``genloop.workers.engine``), and
    with its siblings (the node's other shards, a loop round's other images). The op returns
    at once (:class:`~genloop.workers.deferred.Deferred`); the images become PNG artifacts when
    the batch is done, and stay in the process's image cache for scoring. Progress is reported
    per step (throttled by ``ctx``), and a cancelled run stops the shard between two denoising
    steps, or when its batch forms.
    """
    from ..engine.generate import ImageSettings, png_bytes

    if len(inputs) > MAX_CANDIDATES_PER_NODE:
        # A fan-out the submit-time budget could not see (a custom op's output upstream).
        raise Permanent(f"generate got {len(inputs)} requests; at most "
                        f"{MAX_CANDIDATES_PER_NODE} per instance (split it with map=True)")
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
    settings = ImageSettings(
        steps=params.steps or defaults.steps,
        guidance=defaults.guidance if params.guidance is None else params.guidance,
        width=params.width or defaults.width,
        height=params.height or defaults.height,
        negative_prompt=params.negative_prompt,
        cache=params.cache,
    )

    def on_step(done: int, total: int) -> None:
        ctx.check_cancelled()
        ctx.progress(done, total)

    job = models.engine.submit(
        params.model, [r.prompt for r in requests], [r.seed for r in requests], settings,
        on_step=on_step, group=ctx.group, group_size=ctx.siblings, check=ctx.check_cancelled,
    )
    cache = getattr(ctx.resources, "images", None)

    def store(images: list) -> list[Candidate]:
        out = []
        for i, (r, img) in enumerate(zip(requests, images, strict=True)):
            key = ctx.artifacts.put(png_bytes(img), "png")
            if cache is not None:
                cache.put(key, img)
            out.append(Candidate(
                index=params.first + i, prompt=r.prompt, seed=r.seed, round=r.round,
                model=params.model, artifact=key, width=settings.width,
                height=settings.height, steps=settings.steps,
            ))
        return out

    return Deferred(job.future, store)
