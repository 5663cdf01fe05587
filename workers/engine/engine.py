"""``GenerationEngine``: the process's way to run generation requests on resident models.

It puts the pieces together: the :class:`~.batching.Batcher` merges concurrent requests, the
model registry lends the resident pipeline (one batch on a model at a time), :mod:`.step_cache`
sets the request's cache mode, :class:`~.oom.OomGuard` splits batches that do not fit, and
:class:`~.compile.Compiler` (optional) compiles the denoiser. A pipeline is prepared for speed
(:mod:`.optimize`) the first time the engine runs it.

Defaults, and why:

* ``window`` 50 ms: a worker's threads pick up the shards of one node within a few ms of each
  other, and one denoising call takes far longer than 50 ms on any device, so waiting costs
  little; requests that arrive while a batch runs join the next one at no wait at all.
* ``group_wait`` 1 s: how long a batch may wait for the rest of a job group (a loop round's
  instances, which a worker's threads hand over a few ms apart); a complete group or a full
  batch never waits.
* ``max_batch`` 16 on CUDA; on CPU 32 for images of at most 64×64 pixels and 8 above (see
  :func:`default_max_batch`); the OOM guard lowers it per (model, size) when memory says so.
* compile off (compiling takes minutes per shape on CPU); ``channels_last`` on CUDA only; the
  denoiser in bf16 after its first steps on CPUs with native bf16, in the ``default`` cache mode
  only (see :mod:`.cpu_bf16`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from genloop.sdk.errors import Transient

from ..metrics.prometheus import metrics
from .batching import Batcher, BatchKey, Job, Slot
from .compile import Compiler
from .cpu_bf16 import cpu_bf16_step_end, start_cpu_bf16
from .deepcache import deepcache_stats
from .generate import ImageSettings, call_pipeline, edit_pipeline
from .latent_cache import (
    DEFAULT_MAX_BYTES,
    LatentCache,
    Scope,
    Start,
    capture_steps,
    prompt_vectors,
)
from .oom import OomGuard
from .optimize import (
    KernelOptions,
    apply_kernels,
    cpu_computes_bf16,
    use_channels_last,
    use_sdpa,
)
from .resume import Joiner, calls_by_start, joins_midway
from .step_cache import DEFAULT_CACHE, parse_cache, prepare_step_cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineOptions:
    """How a process's engine batches and speeds up; ``None`` means "by device" (and, for
    ``max_batch``, by image size: :func:`default_max_batch`). A configured model may set its own
    ``max_batch``, ``compile``, ``channels_last`` and ``cpu_bf16`` (its ``engine`` table in
    models.toml: :meth:`GenerationEngine.options_for`)."""

    window: float = 0.05
    group_wait: float = 1.0
    max_batch: int | None = None
    compile: bool = False
    compile_backend: str | Callable = "inductor"
    compile_mode: str | None = None
    channels_last: bool | None = None
    #: bf16 autocast of the denoiser on CPU, after its first steps, for calls in the
    #: ``default`` cache mode (``None``: where the CPU computes bf16 natively); see
    #: :mod:`.cpu_bf16`.
    cpu_bf16: bool | None = None
    kernels: KernelOptions = field(default_factory=KernelOptions)
    #: Bytes of intermediate latents kept for ``reuse="auto"`` requests (0: none kept, no
    #: reuse); see :mod:`.latent_cache`.
    latent_cache_bytes: int = DEFAULT_MAX_BYTES


#: Weight of a new batch in the per-model step time (:attr:`GenerationEngine.step_seconds`).
LEARNING_RATE = 0.3

#: On CPU, images of at most this many pixels batch up to :data:`SMALL_IMAGE_BATCH`.
SMALL_IMAGE_PIXELS = 64 * 64
SMALL_IMAGE_BATCH = 32


def default_max_batch(cuda: bool, width: int, height: int) -> int:
    """The batch cap for a (width, height) when none is configured.

    On CPU a small model's denoiser call is mostly fixed per-call cost (Python module calls,
    kernel dispatch), so per-image time keeps falling well past 8 images: measured on the
    shapes model (64×64, one torch thread, 8 concurrent loops), 174 ms per image at a cap of 8,
    122 at 16, 114 at 32. Larger images are compute-bound, gain little and need the memory, so
    they keep 8.
    """
    if cuda:
        return 16
    return SMALL_IMAGE_BATCH if width * height <= SMALL_IMAGE_PIXELS else 8


class _AllFailed(Exception):
    """Every job in the running batch has failed (cancelled): stop the call between steps."""


class GenerationEngine:
    """Batched, cached, OOM-safe generation on the models of ``models`` (a ModelRegistry)."""

    def __init__(self, models: Any, options: EngineOptions | None = None) -> None:
        self.models = models
        self.options = options or EngineOptions()
        self.cuda = str(models.device).startswith("cuda")
        self.oom = OomGuard()
        self._per_model: dict[str, EngineOptions] = {}
        # One compiler for every model that compiles (it keeps its state per model)
        self.compiler = Compiler(self.options.compile_backend, self.options.compile_mode)
        self._prepared: weakref.WeakSet = weakref.WeakSet()
        self._warmed: weakref.WeakSet = weakref.WeakSet()  # pipelines past their first batch
        self._edit_pipes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._batcher: Batcher | None = None
        self._closed = False
        #: Seconds one image's denoising step takes, per model, as measured on this process's
        #: batches (a moving average; what the pool's backlog estimate reads), and how many
        #: images it was measured on (the estimate's weight): a pipeline's first batch counts
        #: none, and the next batch replaces its figure.
        self.step_seconds: dict[str, float] = {}
        self.step_images: dict[str, int] = {}
        self.latents = LatentCache(self.options.latent_cache_bytes)

    @property
    def batcher(self) -> Batcher:
        with self._lock:
            if self._closed:
                raise RuntimeError("the generation engine is closed")
            if self._batcher is None:
                self._batcher = Batcher(self._run_batch, window=self.options.window,
                                        max_batch=self._cap,
                                        group_wait=self.options.group_wait)
                self._batcher.torch_threads = self.models.batch_threads
            return self._batcher

    def options_for(self, model: str) -> EngineOptions:
        """The process's options with what ``model``'s config entry sets over them (the
        config does not change while the engine runs: resolved once per model)."""
        options = self._per_model.get(model)
        if options is None:
            own = self.models.engine_settings(model)
            options = self._per_model[model] = (replace(self.options, **own) if own
                                                 else self.options)
        return options

    def max_batch(self, width: int, height: int, model: str | None = None) -> int:
        """The batch cap for images of this size (of ``model``): configured, else
        :func:`default_max_batch`."""
        options = self.options if model is None else self.options_for(model)
        return options.max_batch or default_max_batch(self.cuda, width, height)

    def channels_last(self, model: str) -> bool:
        option = self.options_for(model).channels_last
        return self.cuda if option is None else option

    def cpu_bf16(self, model: str) -> bool:
        option = self.options_for(model).cpu_bf16
        return not self.cuda and (cpu_computes_bf16() if option is None else option)

    def _cap(self, key: BatchKey) -> int:
        model, width, height = key[:3]
        learned = self.oom.limit((model, width, height))
        sized = self.max_batch(width, height, model)
        return sized if learned is None else min(learned, sized)

    def submit(self, model: str, prompts: Sequence[str], seeds: Sequence[int],
               settings: ImageSettings, on_step: Callable[[int, int], None] | None = None,
               negative_prompts: Sequence[str | None] | None = None,
               init_images: Sequence | None = None, masks: Sequence | None = None, *,
               group: Hashable = None, group_size: int = 1,
               check: Callable[[], None] | None = None, metered: bool = True,
               priority: str = "interactive", reuse: bool = False,
               namespace: str | None = None) -> Job:
        """Queue one request; its future resolves to one PIL image per (prompt, seed).

        Nothing blocks: the caller attaches to ``job.future``. An edit (``settings.kind``
        img2img / inpaint) gives one init image (and mask) per candidate; edits batch with
        edits of the same kind and strength only. ``group``/``group_size`` name the request's
        siblings (see :mod:`.batching`); ``check()`` runs just before the request's batch
        starts and may raise (cancellation) to fail the request alone. ``metered=False``
        (a warm-up) keeps the request out of the batch and image metrics. ``priority``: the
        run's lane, ``interactive`` or ``batch`` (see :mod:`.batching`). ``reuse``: text-to-image
        candidates may start from the stored latents of a similar prompt of the same seed and
        ``namespace`` (:mod:`.latent_cache`); each one's start is in ``job.starts``."""
        parse_cache(settings.cache)  # a bad mode fails here, in the caller's thread
        if (settings.kind != "text") != (init_images is not None) or (
                (settings.kind == "inpaint") != (masks is not None)):
            raise ValueError(f"a {settings.kind!r} request takes init images "
                             f"{'and masks ' if settings.kind == 'inpaint' else ''}only then")
        key: BatchKey = (model, settings.width, settings.height, settings.steps,
                         float(settings.guidance), settings.cache, settings.kind,
                         float(settings.strength))
        negatives = (negative_prompts if negative_prompts is not None
                     else [settings.negative_prompt] * len(prompts))
        job = Job(key, list(prompts), list(seeds), list(negatives), settings.denoised_steps,
                  on_step, init_images=init_images, masks=masks,
                  group=group, group_size=group_size, check=check, metered=metered,
                  priority=priority, reuse=reuse and settings.kind == "text",
                  namespace=namespace)
        log.debug("request of %d at %s queued", len(job.prompts), key)
        return self.batcher.submit(job)

    def wait(self, job: Job, check: Callable[[], None] | None = None,
             poll: float = 0.1) -> list:
        """The job's images. ``check()`` runs every ``poll`` s while waiting and may raise
        (cancellation): the job is then withdrawn and the error re-raised. So is anything raised
        into this thread meanwhile (a worker's time limit)."""
        try:
            while True:
                try:
                    return job.future.result(timeout=poll)
                except concurrent.futures.TimeoutError:
                    pass
                if check is not None:
                    check()
        except BaseException as exc:
            job.fail(exc)  # no-op when the job itself failed
            if self._batcher is not None:
                self._batcher.withdraw(job)
            raise

    def generate(self, model: str, prompts: Sequence[str], seeds: Sequence[int],
                 settings: ImageSettings, on_step: Callable[[int, int], None] | None = None,
                 check: Callable[[], None] | None = None, init_images: Sequence | None = None,
                 masks: Sequence | None = None) -> list:
        """:meth:`submit` then :meth:`wait`."""
        return self.wait(self.submit(model, prompts, seeds, settings, on_step,
                                     init_images=init_images, masks=masks), check)

    def close(self) -> None:
        """Stop: a running batch ends at its next step, queued requests fail (Transient)."""
        with self._lock:
            self._closed = True
            batcher = self._batcher
        if batcher is not None:
            batcher.close()

    def load(self) -> dict[str, Any]:
        """What this engine holds now: the running batch (model and images, or ``None``), the
        images queued per model, and the most images the last batch's kind takes."""
        batcher = self._batcher
        if batcher is None:
            return {"running": None, "queued": {}, "batch_limit": None}
        return {"running": batcher.running, "queued": batcher.queued_images(),
                "batch_limit": batcher.last_limit}

    def prepare(self, pipe, model: str) -> None:
        """Per-model speed settings, once per resident pipeline."""
        if pipe in self._prepared:
            return
        use_sdpa(pipe)
        if self.channels_last(model):
            use_channels_last(pipe)
        apply_kernels(pipe, str(self.models.device), self.options.kernels)
        if self.options_for(model).compile:
            self.compiler.apply(pipe)
        self._prepared.add(pipe)

    def _run_batch(self, key: BatchKey, slots: list[Slot]) -> None:
        model, width, height, steps, guidance, cache, kind, strength = key
        settings = ImageSettings(steps=steps, guidance=guidance, width=width, height=height,
                                 cache=cache, kind=kind, strength=strength)
        shape_key = (model, width, height)
        with self.models.acquire(model) as resident:
            self.prepare(resident, model)
            pipe = self._edit_pipe(resident, kind)
            # A pipeline's first batch is its warm-up, measured provisionally (it counts no
            # images, and the next batch replaces it): it pays one-off costs (kernel
            # selection, a worker still starting), and on the pool benchmark workers that ran
            # one batch at start published 3-8x the step time and moved the pool's backlog
            # estimate by +55%.
            warm = resident in self._warmed
            self._warmed.add(resident)

            def run(chunk: Sequence[Slot]) -> list:
                live = [s for s in chunk if not s.job.failed]
                if not live:
                    return [None] * len(chunk)
                return self._call(pipe, shape_key, live, settings, chunk)

            if metered := [s for s in slots if s.job.metered]:
                metrics().engine_batch(kind, len(metered))
            began = time.perf_counter()
            images = self.oom.run_split(shape_key, slots, run)
            if metered:
                self._learn(model, time.perf_counter() - began, len(slots),
                            settings.denoised_steps, provisional=not warm)
        for slot, image in zip(slots, images, strict=True):
            if image is not None:
                slot.job.deliver(slot.index, image)
        metrics().images.inc(sum(image is not None and slot.job.metered
                                 for slot, image in zip(slots, images, strict=True)))

    def _learn(self, model: str, seconds: float, images: int, steps: int,
               provisional: bool = False) -> None:
        per_step = seconds / (images * steps)
        counted = self.step_images.get(model, 0)
        self.step_seconds[model] = per_step if not counted else (
            (1 - LEARNING_RATE) * self.step_seconds[model] + LEARNING_RATE * per_step)
        self.step_images[model] = counted + (0 if provisional else images)

    def _edit_pipe(self, pipe, kind: str):
        """The ``kind`` pipeline on ``pipe``'s resident components, made once per pipeline."""
        if kind == "text":
            return pipe
        derived = self._edit_pipes.setdefault(pipe, {})
        if kind not in derived:
            derived[kind] = edit_pipeline(pipe, kind)
        return derived[kind]

    def _call(self, pipe, shape_key: tuple, live: list[Slot], settings: ImageSettings,
              chunk: Sequence[Slot]) -> list:
        denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
        reuse = self._reuse(pipe, shape_key[0], live, settings)
        starts = reuse.starts if reuse is not None else [None] * len(live)

        def part(call: list[tuple[int, list[int]]], order: list[int]) -> list:
            """One pipeline call for live slots by start step: the first start's from there,
            each later one joining at its step (:mod:`.resume`); images in ``order``."""
            start, members = call[0]
            by_job: dict[int, tuple[Job, dict[int, list[int]]]] = {}
            for step, m in call:
                for i in m:
                    job = live[i].job
                    by_job.setdefault(id(job), (job, {}))[1].setdefault(step, []).append(
                        live[i].index)

            def step_end(step: int) -> None:
                if denoiser is not None:
                    cpu_bf16_step_end(denoiser, step)
                if step == 0:
                    self.oom.check_injected(shape_key, len(live))
                if self._closed or (self._batcher is not None and self._batcher.closed):
                    for job, _ in by_job.values():
                        job.fail(Transient("the worker's generation engine is shutting down"))
                done = start + step + 1
                for job, indices_by_start in by_job.values():
                    for begins, indices in indices_by_start.items():
                        if done > begins:
                            job.step(indices, done)
                if all(job.failed for job, _ in by_job.values()):
                    raise _AllFailed()

            def latents_of(m: list[int]) -> torch.Tensor:
                return torch.stack([c.latents for i in m if (c := starts[i]) is not None])

            steps = settings.denoised_steps - start
            plan = prepare_step_cache(pipe, settings.cache, steps)
            if denoiser is not None:
                bf16 = self.cpu_bf16(shape_key[0]) and settings.cache == DEFAULT_CACHE
                start_cpu_bf16(denoiser, steps if bf16 else None)
            slots = [live[i] for i in members]
            images = call_pipeline(
                pipe, [s.prompt for s in slots], [s.seed for s in slots], settings,
                [s.negative_prompt for s in slots], step_end,
                init_images=[s.init_image for s in slots] if settings.kind != "text" else None,
                masks=[s.mask for s in slots] if settings.kind == "inpaint" else None,
                start=start, latents=latents_of(members) if start else None,
                on_latents=reuse.capture(order) if reuse is not None else None,
                joiners=[Joiner(step, latents_of(m), [live[i].prompt for i in m],
                                [live[i].negative_prompt or "" for i in m])
                         for step, m in call[1:]])
            if plan.kind == "deepcache":
                metrics().step_cache_skips.inc(deepcache_stats(pipe.unet)[1])
            return images

        def run() -> list:
            images: list = [None] * len(live)
            steps = [s.step if s is not None else 0 for s in starts]
            for call in calls_by_start(steps, joins_midway(pipe)):
                order = [i for _, m in call for i in m]
                for i, image in zip(order, part(call, order), strict=True):
                    images[i] = image
            return images

        shape = (len(live), settings.width, settings.height)
        try:
            images = (self.compiler.call(pipe, shape, run)
                      if self.options_for(shape_key[0]).compile else run())
        except _AllFailed:
            log.debug("batch of %d at %s abandoned: all its requests failed", len(live), shape_key)
            return [None] * len(chunk)
        if reuse is not None:
            reuse.store(self.latents)
            metrics().steps_reused.inc(sum(s.step for s in starts if s is not None))
            for slot, start in zip(live, starts, strict=True):
                slot.job.starts[slot.index] = start
        out = iter(images)
        return [next(out) if s in live else None for s in chunk]

    def _reuse(self, pipe, model: str, live: list[Slot],
               settings: ImageSettings) -> _Reuse | None:
        """The live slots' starts and the latents to keep from this call; ``None`` where the
        call keeps none (no request in it asked for reuse, an edit, no latent cache, a pipeline
        without a text encoder): requests that never reuse pay nothing for it."""
        if (settings.kind != "text" or not self.latents.max_bytes
                or not any(s.job.reuse for s in live)):
            return None
        vectors = prompt_vectors(pipe, [s.prompt for s in live])
        if vectors is None:
            return None
        identity = self.models.identity(model)
        scopes = [Scope(identity, settings.width, settings.height, settings.steps,
                        settings.guidance, settings.cache, s.negative_prompt or "", s.seed,
                        s.job.namespace)
                  for s in live]
        starts = [self.latents.find(scope, vector) if s.job.reuse else None
                  for s, scope, vector in zip(live, scopes, vectors, strict=True)]
        return _Reuse(live, scopes, vectors, starts, capture_steps(settings.steps))


@dataclass
class _Reuse:
    """One batch's dealings with the latent cache: where each live slot starts, and the
    latents its call produces at the steps worth keeping (stored once the batch is done, so a
    failed batch keeps nothing)."""

    live: list[Slot]
    scopes: list[Scope]
    vectors: torch.Tensor
    starts: list[Start | None]
    steps: tuple[int, ...]
    kept: dict[int, dict[int, torch.Tensor]] = field(default_factory=dict)

    def capture(self, members: list[int]) -> Callable[[int, torch.Tensor], None]:
        def on_latents(done: int, latents: torch.Tensor) -> None:
            # The rows are the first of ``members``: those that have joined the batch so far.
            if done in self.steps:
                for row, i in zip(latents.detach().cpu(), members, strict=False):
                    self.kept.setdefault(i, {})[done] = row.clone()
        return on_latents

    def store(self, cache: LatentCache) -> None:
        for i, latents in self.kept.items():
            slot = self.live[i]
            if not slot.job.failed:
                cache.put(self.scopes[i], slot.prompt, self.vectors[i], latents)
