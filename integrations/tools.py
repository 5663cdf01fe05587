"""The framework-neutral tool surface: the six operations an agent needs, over any client.

:class:`GenloopTools` validates a call's arguments against the catalog's models (nothing is
submitted for an invalid call), builds the run, waits up to the call's ``wait_seconds`` while
reporting progress, and returns a :class:`~.outcome.ToolOutput`. A run not done by then is
returned by id, and ``get_run`` waits again: long work never blocks an agent's turn.

The logic is written once, for asyncio. The sync entry point runs it on a private event loop
over the sync client's back end in threads, so the LangChain ``_run`` / ``_arun`` pair and the
other adapters share every line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncGenerator, Coroutine, Mapping
from contextlib import aclosing
from typing import Any, NamedTuple, TypeVar

from pydantic import ValidationError

from genloop.sdk import (
    AsyncClient,
    AsyncRun,
    Client,
    Event,
    GenerationRequest,
    GenloopError,
    Graph,
    Loop,
    RunSpec,
    ScoredCandidate,
)
from genloop.sdk.aio import ThreadedBackend

from . import outcome
from .arguments import ToolArguments, argument_models
from .catalog import Catalog
from .errors import ToolCallError, from_genloop, invalid_arguments
from .outcome import ToolImage, ToolOutput
from .progress import ProgressMeter, ProgressSink
from .refines import RefineWatch

T = TypeVar("T")


class ToolSpec(NamedTuple):
    name: str
    description: str
    arguments: type[ToolArguments]


DESCRIPTIONS = {
    "generate_images": (
        "Generate n images for a prompt, score each against it (0-100, higher is better) and "
        "return the top_k as PNGs. If done is false, call get_run with the run_id."),
    "run_loop": (
        "Improve an image over rounds of generate, score (0-100) and refine. Returns the best "
        "image and each round's best score. If done is false: refine_run if refine is set "
        "(a pause), else get_run."),
    "get_run": (
        "Wait for a run: its status, and once it ends (done), its best images and scores; a "
        "paused loop shows its pause again."),
    "get_result": "A run's images and scores so far, without waiting.",
    "cancel_run": "Stop a run; its finished images stay readable.",
    "refine_run": (
        "Answer a loop paused for you (refine set): the next round's images, each a prompt "
        "and seed, or an edit of a shown candidate (init_image, strength). Then waits like "
        "get_run."),
}


#: The label key of the tools' ``label`` argument.
LABEL_KEY = "tool.label"


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, also when this thread has a running loop
    (a notebook, a sync tool called inside an async framework): then on a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class GenloopTools:
    """The tools over one client.

    ``client`` is a ``Client`` (sync and async calls both work; async ones run the client's
    calls in threads) or an ``AsyncClient`` (async calls only, native over HTTP). Pass both to
    have native async and sync calls over the same back end. ``webhook``: a URL of the host's
    that every run the tools start reports its end to (through a gateway, which signs it).
    """

    def __init__(self, client: Client | AsyncClient, *, aclient: AsyncClient | None = None,
                 catalog: Catalog | None = None, webhook: str | None = None) -> None:
        self.client = client if isinstance(client, Client) else None
        if aclient is None and isinstance(client, AsyncClient):
            aclient = client
        if aclient is None and self.client is not None:
            aclient = AsyncClient(ThreadedBackend(self.client.backend))
        if aclient is None:
            raise TypeError(f"GenloopTools needs a Client or an AsyncClient, not {client!r}")
        self.aclient = aclient
        self.catalog = catalog or Catalog()
        #: The host's webhook URL, put on every run the tools start (through a gateway): the
        #: host hears of runs ending without a tool call waiting on them.
        self.webhook = webhook
        models = argument_models(self.catalog)
        self.specs = {name: ToolSpec(name, DESCRIPTIONS[name], models[name]) for name in models}

    # -- arguments ----------------------------------------------------------------------------
    def parse(self, name: str, arguments: Mapping[str, Any] | ToolArguments) -> ToolArguments:
        """``arguments`` checked against tool ``name``'s model (``ToolCallError`` if invalid)."""
        spec = self.specs.get(name)
        if spec is None:
            raise ToolCallError(name, f"There is no tool {name!r}; the tools are: "
                                      f"{', '.join(self.specs)}.")
        if isinstance(arguments, spec.arguments):
            return arguments
        if isinstance(arguments, ToolArguments):
            arguments = arguments.model_dump()
        if not isinstance(arguments, Mapping):
            raise ToolCallError(name, f"Arguments for {name} must be a JSON object.")
        try:
            return spec.arguments.model_validate(dict(arguments))
        except ValidationError as exc:
            raise invalid_arguments(name, exc) from None

    # -- calls --------------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any] | ToolArguments) -> ToolOutput:
        """Call tool ``name`` from sync code (needs a sync ``Client``)."""
        args = self.parse(name, arguments)
        if self.client is None:
            raise ToolCallError(name, "These tools were built on an AsyncClient: call them "
                                      "asynchronously, or pass a sync Client as well.")
        aclient = AsyncClient(ThreadedBackend(self.client.backend))
        return run_sync(self._call(aclient, name, args, None))

    async def acall(self, name: str, arguments: Mapping[str, Any] | ToolArguments,
                    progress: ProgressSink | None = None) -> ToolOutput:
        """Call tool ``name``; ``progress`` hears how a waiting call's run advances."""
        args = self.parse(name, arguments)
        return await self._call(self.aclient, name, args, progress)

    async def _call(self, aclient: AsyncClient, name: str, args: Any,
                    progress: ProgressSink | None) -> ToolOutput:
        try:
            if name in ("generate_images", "run_loop"):
                spec = self._spec(name, args)
                run = await aclient.submit(spec)
                return await self._wait(aclient, run, args.wait_seconds, progress,
                                        limit=args.top_k if name == "generate_images" else 4)
            run = await aclient.get(await self._run_id(aclient, name, args))
            if name == "refine_run":
                await run.refine([self._request(r) for r in args.requests], node_id=args.node_id)
            if name in ("get_run", "refine_run"):
                return await self._wait(aclient, run, args.wait_seconds, progress, limit=4)
            if name == "get_result":
                return await self._render(aclient, run, args.max_images)
            return outcome.cancelled(await run.cancel())
        except GenloopError as exc:
            raise from_genloop(name, exc) from None

    async def _run_id(self, aclient: AsyncClient, name: str, args: Any) -> str:
        """The call's run: its ``run_id``, or the newest run with its ``label``."""
        label = getattr(args, "label", None)
        if args.run_id is not None or label is None:
            return str(args.run_id)
        async for run in aclient.runs(labels={LABEL_KEY: label}, page_size=1):
            return run.id
        raise ToolCallError(name, f"No run has the label {label!r}. Labels come from the label "
                                  "argument of generate_images and run_loop.")

    def _spec(self, name: str, a: Any) -> RunSpec:
        image = {k: v for k, v in {"steps": a.steps, "width": a.width, "height": a.height}.items()
                 if v is not None}
        options = self.catalog.evaluator_options.get(a.evaluator)
        extra: dict[str, Any] = {}
        if a.label is not None:
            extra["labels"] = {LABEL_KEY: a.label}
        if self.webhook is not None:
            extra["webhook"] = {"url": self.webhook}
        if name == "run_loop":
            return Loop(prompt=a.prompt, rounds=a.rounds, candidates=a.candidates,
                        target=a.target, refiner=a.refiner, model=a.model,
                        evaluator=a.evaluator, evaluator_options=options, seed=a.seed, **image,
                        **extra)
        g = Graph(**extra)
        images = g.generate(a.prompt, n=a.n, seed=a.seed, model=a.model, id="generate", **image)
        scores = g.score(images, text=a.prompt, evaluator=a.evaluator, id="score",
                         **({"options": options} if options else {}))
        g.select(scores, top_k=a.top_k, id="best")
        return g

    @staticmethod
    def _request(image: Any) -> GenerationRequest:
        # The loop sets the round; 1 only satisfies the model.
        return GenerationRequest(round=1, reason="agent", **image.model_dump())

    async def _wait(self, aclient: AsyncClient, run: AsyncRun, wait_seconds: float,
                    progress: ProgressSink | None, limit: int) -> ToolOutput:
        """Until the run ends, pauses for an agent refine, or ``wait_seconds`` pass.

        The events so far are read first (without waiting), so a pause that began before this
        call is seen even with ``wait_seconds=0``."""
        start = time.monotonic()
        info = await run.status()
        meter, watch = ProgressMeter(len(info.nodes)), RefineWatch()
        last = 0

        async def read(events: AsyncGenerator[Event, None], until_paused: bool) -> None:
            nonlocal last
            async with aclosing(events):
                async for event in events:
                    last = event.id
                    watch.read(event)
                    report = meter.read(event)
                    if report is not None and progress is not None:
                        await progress(report)
                    if until_paused and watch.waiting is not None:
                        return

        await read(run.events(follow=False), until_paused=False)
        # Asked again after the replay: a run that ended during it wrote its last event
        # already, and following after that event would wait out the whole wait_seconds.
        info = await run.status()
        if watch.waiting is None and not info.status.terminal and wait_seconds > 0:
            try:
                async with asyncio.timeout(wait_seconds):
                    await read(run.events(last), until_paused=True)
            except TimeoutError:
                pass
        info = await run.status()
        if watch.waiting is not None and not info.status.terminal:
            request = watch.waiting
            shown = outcome.ranked(request.scored)[:limit]
            images = [await self._image(aclient, c, "best" if i == 0 else f"top {i + 1}")
                      for i, c in enumerate(shown)]
            return outcome.awaiting_refine(info, request, images)
        if not info.status.terminal:
            return outcome.pending(info, round(time.monotonic() - start, 1))
        return await self._render(aclient, run, limit)

    @staticmethod
    async def _image(aclient: AsyncClient, c: ScoredCandidate, label: str) -> ToolImage:
        return ToolImage(artifact=c.artifact, png=await aclient.read_artifact(c.artifact),
                         score=c.score, evaluator=c.evaluator, prompt=c.prompt, seed=c.seed,
                         round=c.round, label=label)

    @classmethod
    async def _render(cls, aclient: AsyncClient, run: AsyncRun, limit: int) -> ToolOutput:
        result = await run.result()
        images = [await cls._image(aclient, c, label)
                  for label, c in outcome.chosen(result, limit)]
        return outcome.describe(result, images)
