"""``generate``: images from a text-to-image pipeline of the model registry, or edits of images
(img2img / inpainting) on the same resident components."""

from __future__ import annotations

import io
from dataclasses import replace

from genloop.sdk.errors import NotFound, Permanent
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
    with other shards of the same model and settings (see ``genloop.workers.engine``); edits
    batch with edits of the same kind and strength. Progress is reported per step (throttled
    by ``ctx``), and a cancelled run stops the shard between two denoising steps, or while it
    waits for its batch.
    """
    from ..engine.generate import ImageSettings, png_bytes

    edit = dict(init_image=params.init_image, mask=params.mask)
    if inputs:
        requests = [GenerationRequest.model_validate(i, from_attributes=True) for i in inputs]
    elif params.prompt:
        requests = [
            GenerationRequest(prompt=params.prompt, seed=params.seed + i, round=params.round,
                              **edit)
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

    def settings_of(r: GenerationRequest) -> ImageSettings:
        s = replace(base, steps=r.steps) if r.steps else base
        if r.init_image is None:
            if r.mask is not None:
                raise Permanent("a mask needs an init_image to apply to")
            return s
        return replace(s, kind="inpaint" if r.mask else "img2img",
                       strength=r.strength or params.strength)

    settings = [settings_of(r) for r in requests]
    pictures = _Pictures(ctx, base.width, base.height)

    def on_step(done: int, total: int) -> None:
        ctx.check_cancelled()
        ctx.progress(done, total)

    # Requests that share settings go to the engine as one request (one batch); a refiner
    # that mixes drafts, finished images and edits makes more than one group.
    groups: dict[ImageSettings, list[int]] = {}
    for i, s in enumerate(settings):
        groups.setdefault(s, []).append(i)
    images: list = [None] * len(requests)
    for group, members in groups.items():
        made = models.engine.generate(
            params.model, [requests[i].prompt for i in members],
            [requests[i].seed for i in members], group, on_step=on_step,
            check=ctx.check_cancelled,
            init_images=(None if group.kind == "text"
                         else [pictures.get(requests[i].init_image, "RGB") for i in members]),
            masks=(None if group.kind != "inpaint"
                   else [pictures.get(requests[i].mask, "L") for i in members]),
        )
        for i, img in zip(members, made, strict=True):
            images[i] = img
    return [
        Candidate(
            index=params.first + i, prompt=r.prompt, seed=r.seed, round=r.round,
            model=params.model, artifact=ctx.artifacts.put(png_bytes(img), "png"),
            width=s.width, height=s.height, steps=s.steps,
            denoised_steps=None if s.kind == "text" else s.denoised_steps,
            init_image=r.init_image, mask=r.mask,
            strength=None if s.kind == "text" else s.strength,
        )
        for i, (r, s, img) in enumerate(zip(requests, settings, images, strict=True))
    ]


class _Pictures:
    """Init images and masks read from the artifact store, at the size being generated."""

    def __init__(self, ctx: OpContext, width: int, height: int) -> None:
        self.ctx, self.size = ctx, (width, height)
        self._seen: dict[tuple[str, str], object] = {}

    def get(self, key: str | None, mode: str):
        from PIL import Image

        if key is None:
            raise Permanent("an edit needs its init_image")
        if (key, mode) not in self._seen:
            try:
                image = Image.open(io.BytesIO(self.ctx.artifacts.get(key)))
                image = image.convert(mode)
            except (NotFound, OSError) as exc:
                raise Permanent(f"cannot read image artifact {key!r}: {exc}") from exc
            if image.size != self.size:
                image = image.resize(self.size, Image.Resampling.BICUBIC)
            self._seen[(key, mode)] = image
        return self._seen[(key, mode)]
