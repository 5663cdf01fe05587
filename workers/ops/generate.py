"""``generate``: images from a text-to-image pipeline of the model registry, or edits of images
(img2img / inpainting) on the same resident components."""

from __future__ import annotations

import functools
import io
from concurrent.futures import Future
from dataclasses import replace

from genloop.sdk.errors import NotFound, Permanent
from genloop.sdk.ops import (
    MAX_CANDIDATES_PER_NODE,
    Candidate,
    GenerateParams,
    GenerationRequest,
    LatentStart,
)

from ..runtime.context import OpContext
from ..runtime.deferred import Deferred
from .registry import OpSpec


def _identity(params: GenerateParams, resources) -> str:
    return resources.model_identity(params.model)


def generate(params: GenerateParams, inputs: list, ctx: OpContext) -> Deferred:
    """Candidates ``first .. first + n - 1`` of the node (seed ``seed + i`` each); or, on a
    mapped node, the one image its :class:`GenerationRequest` input asks for.

    The shard goes to the process's generation engine, which may run it in one batched call
    with other shards of the same model and settings (see ``genloop.workers.engine``), and
    with its siblings (the node's other shards, a loop round's other images); edits batch with
    edits of the same kind and strength. The op returns at once
    (:class:`~genloop.workers.runtime.deferred.Deferred`); the images become PNG artifacts when the
    batch is done, and stay in the process's image cache for scoring. Progress is reported
    per step (throttled by ``ctx``), and a cancelled run stops the shard between two denoising
    steps, or when its batch forms.
    """
    from ..engine.generate import ImageSettings, png_bytes

    if len(inputs) > MAX_CANDIDATES_PER_NODE:
        # A fan-out the submit-time budget could not see (a custom op's output upstream).
        raise Permanent(f"generate got {len(inputs)} requests; at most "
                        f"{MAX_CANDIDATES_PER_NODE} per instance (split it with map=True)")
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
        cache=defaults.cache if params.cache == "default" else params.cache,
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
    # that mixes drafts, finished images and edits makes more than one. The instance counts
    # once among its siblings, so only its first request names the group.
    groups: dict[ImageSettings, list[int]] = {}
    for i, s in enumerate(settings):
        groups.setdefault(s, []).append(i)
    jobs = []
    for n, (group, members) in enumerate(groups.items()):
        jobs.append((members, models.engine.submit(
            params.model, [requests[i].prompt for i in members],
            [requests[i].seed for i in members], group, on_step=on_step,
            init_images=(None if group.kind == "text"
                         else [pictures.get(requests[i].init_image, "RGB") for i in members]),
            masks=(None if group.kind != "inpaint"
                   else [pictures.get(requests[i].mask, "L") for i in members]),
            group=ctx.group if n == 0 else None, group_size=ctx.siblings,
            check=ctx.check_cancelled, priority=ctx.priority,
            reuse=params.reuse == "auto", namespace=ctx.namespace,
        )))
    cache = pictures.cache

    def store(images: list) -> list[Candidate]:
        starts: list = [None] * len(requests)
        for members, job in jobs:
            for i, start in zip(members, job.starts, strict=True):
                starts[i] = start
        out = []
        for i, (r, s, img) in enumerate(zip(requests, settings, images, strict=True)):
            key = ctx.artifacts.put(png_bytes(img), "png")
            if cache is not None:
                cache.put(key, img)
            start = starts[i]
            out.append(Candidate(
                index=params.first + i, prompt=r.prompt, seed=r.seed, round=r.round,
                model=params.model, artifact=key, width=s.width, height=s.height,
                steps=s.steps, denoised_steps=(
                    s.denoised_steps if s.kind != "text"
                    else None if start is None else s.steps - start.step),
                init_image=r.init_image, mask=r.mask,
                strength=None if s.kind == "text" else s.strength,
                started_from=None if start is None else LatentStart(
                    prompt=start.source, step=start.step, similarity=round(start.similarity, 4)),
            ))
        return out

    return Deferred(_gather(len(requests), [(m, j.future) for m, j in jobs]), store)


#: The built-in op (see :mod:`.builtin`). Version 2: the engine's default step cache (DeepCache)
#: changes pixels slightly (see genloop.workers.engine.step_cache), so results stored by version 1
#: are not reused.
GENERATE = OpSpec("generate", generate, params=GenerateParams, output=Candidate, queue="gpu",
                  identity=_identity, version="2")


def _gather(n: int, parts: list[tuple[list[int], Future]]) -> Future:
    """One future for the shard's images, in request order, from its engine requests' (the
    first failure fails it)."""
    if len(parts) == 1:
        return parts[0][1]
    out: Future = Future()
    images: list = [None] * n
    left = [len(parts)]

    def done(members: list[int], future: Future) -> None:
        if out.done():
            return
        exc = future.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        for i, img in zip(members, future.result(), strict=True):
            images[i] = img
        left[0] -= 1
        if not left[0]:
            out.set_result(images)

    for members, future in parts:
        future.add_done_callback(functools.partial(done, members))
    return out


class _Pictures:
    """Init images and masks (from the process's image cache, else the artifact store), at
    the size being generated."""

    def __init__(self, ctx: OpContext, width: int, height: int) -> None:
        self.ctx, self.size = ctx, (width, height)
        self.cache = getattr(ctx.resources, "images", None)
        self._seen: dict[tuple[str, str], object] = {}

    def get(self, key: str | None, mode: str):
        from PIL import Image

        if key is None:
            raise Permanent("an edit needs its init_image")
        if (key, mode) not in self._seen:
            image = self.cache.get(key) if self.cache is not None else None
            try:
                if image is None:
                    image = Image.open(io.BytesIO(self.ctx.artifacts.get(key)))
                image = image.convert(mode)
            except (NotFound, OSError) as exc:
                raise Permanent(f"cannot read image artifact {key!r}: {exc}") from exc
            if image.size != self.size:
                image = image.resize(self.size, Image.Resampling.BICUBIC)
            self._seen[(key, mode)] = image
        return self._seen[(key, mode)]
