"""Ops the tests use: counting, flaky, failing and slow ones.

Executions are counted in a file per test (``params.log``), so a count survives the process
(the crash test) and cannot be faked by in-process state.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, Field

from genloop.workers import Deferred, OpContext, Permanent, Transient, op


class Value(BaseModel):
    value: int


class CountParams(BaseModel):
    log: str
    value: int = 0
    fail_times: int = 0
    fail_when: int | None = None
    permanent: bool = False
    sleep: float = 0.0


def record(log: str, line: str) -> int:
    """Append ``line`` to the log and return how many lines carry it now."""
    path = Path(log)
    with path.open("a") as f:
        f.write(line + "\n")
    return path.read_text().splitlines().count(line)


def executions(log: str, line: str | None = None) -> int:
    path = Path(log)
    if not path.exists():
        return 0
    lines = path.read_text().splitlines()
    return len(lines) if line is None else lines.count(line)


@op("test-count", params=CountParams, output=Value, min_backoff=0.01, max_backoff=0.05)
def count(params: CountParams, inputs: list, ctx: OpContext) -> Value:
    """Counts executions; fails the first ``fail_times`` attempts; sleeps checking cancel."""
    n = record(params.log, f"{ctx.node_id}:{params.value}")
    deadline = time.monotonic() + params.sleep
    while time.monotonic() < deadline:
        ctx.check_cancelled()
        time.sleep(0.01)
    if n <= params.fail_times:
        raise (Permanent if params.permanent else Transient)(f"planned failure {n}")
    return Value(value=params.value + sum(i.value for i in inputs if isinstance(i, Value)))


@op("test-items", params=CountParams, output=Value)
def items(params: CountParams, inputs: list, ctx: OpContext) -> list[Value]:
    """``value`` items 0 .. value - 1."""
    record(params.log, f"{ctx.node_id}:items")
    return [Value(value=i) for i in range(params.value)]


@op("test-each", params=CountParams, output=Value, min_backoff=0.01, max_backoff=0.05)
def each(params: CountParams, inputs: list, ctx: OpContext) -> Value:
    """A mapped op: doubles its item; always fails on item ``fail_when``."""
    (item,) = inputs
    record(params.log, f"{ctx.node_id}:{item.value}")
    if params.fail_when == item.value:
        raise Transient(f"item {item.value} always fails")
    return Value(value=2 * item.value)


@op("test-sum", params=CountParams, output=Value)
def total(params: CountParams, inputs: list, ctx: OpContext) -> Value:
    record(params.log, f"{ctx.node_id}:sum")
    return Value(value=sum(i.value for i in inputs))


class RenderParams(BaseModel):
    """Shaped like ``generate``'s params, so the scheduler shards it the same way."""

    redis_url: str
    tag: str
    n: int = 1
    seed: int = 0
    shard_size: int = 4
    first: int = 0
    seconds: float = 0.2


@op("test-render", params=RenderParams, output=Value, queue="gpu", min_backoff=0.05,
    max_backoff=0.2)
def render(params: RenderParams, inputs: list, ctx: OpContext) -> list[Value]:
    """Stands in for generation in the multi-process tests: slow, cancellable, and counting its
    bodies and artifact writes in Redis, where every process's counts add up."""
    import os

    import redis

    r = redis.Redis.from_url(params.redis_url)
    r.incr(f"{params.tag}:bodies")
    r.set(f"{params.tag}:busy", os.getpid())
    # Like generate: all the denoising first, then the artifacts.
    deadline = time.monotonic() + params.seconds * params.n
    while time.monotonic() < deadline:
        ctx.check_cancelled()
        time.sleep(0.01)
    out = []
    for seed in range(params.seed, params.seed + params.n):
        ctx.artifacts.put(f"candidate {params.tag} {seed}".encode(), "png")
        r.incr(f"{params.tag}:writes:{seed}")
        out.append(Value(value=seed))
    return out


class BarrierParams(BaseModel):
    redis_url: str
    tag: str
    parties: int = 2
    name: str = Field("", description="sets parties apart, so each has its own result key")


@op("test-barrier", params=BarrierParams, output=Value)
def barrier(params: BarrierParams, inputs: list, ctx: OpContext) -> Value:
    """Returns only once ``parties`` bodies have arrived, so parents finish at the same instant."""
    import redis

    r = redis.Redis.from_url(params.redis_url)
    r.incr(f"{params.tag}:bodies:{ctx.node_id}")
    arrived = r.incr(f"{params.tag}:arrived")
    deadline = time.monotonic() + 30
    while arrived < params.parties and time.monotonic() < deadline:
        time.sleep(0.001)
        arrived = int(r.get(f"{params.tag}:arrived"))
    if arrived < params.parties:
        raise Permanent(f"only {arrived} of {params.parties} parties ran at once")
    return Value(value=sum(i.value for i in inputs if isinstance(i, Value)) + 1)


@op("test-deferred", params=CountParams, output=Value, min_backoff=0.01, max_backoff=0.05)
def deferred(params: CountParams, inputs: list, ctx: OpContext) -> Deferred:
    """Like ``test-count``, but its work finishes on another thread after the op returned (as
    the engine's does): fails the first ``fail_times`` attempts there."""
    import threading
    from concurrent.futures import Future

    n = record(params.log, f"{ctx.node_id}:{params.value}")
    future: Future = Future()

    def finish() -> None:
        if n <= params.fail_times:
            error = (Permanent if params.permanent else Transient)(f"planned failure {n}")
            future.set_exception(error)
        else:
            future.set_result(params.value)

    threading.Timer(params.sleep, finish).start()
    return Deferred(future, lambda value: Value(value=value))


class HeldParams(BaseModel):
    redis_url: str
    tag: str
    steps: int = 3


@op("test-engine-held", params=HeldParams, output=Value, queue="gpu")
def engine_held(params: HeldParams, inputs: list, ctx: OpContext) -> Deferred:
    """One ``tiny`` image through the process's real engine, deferred as ``generate`` is; each
    denoising step waits until the test sets ``{tag}:gate``, so the work sits inside the engine
    for as long as the test needs. Bodies and completions are counted in Redis."""
    import os

    import redis

    from genloop.workers.engine import ImageSettings

    r = redis.Redis.from_url(params.redis_url)
    r.incr(f"{params.tag}:bodies")

    def on_step(done: int, total: int) -> None:
        r.set(f"{params.tag}:in-engine", os.getpid())
        while not r.exists(f"{params.tag}:gate"):
            time.sleep(0.02)

    def completed(images: list) -> Value:
        r.incr(f"{params.tag}:completions")
        return Value(value=len(images))

    settings = ImageSettings(steps=params.steps, guidance=5.0, width=32, height=32)
    job = ctx.resources.models.engine.submit("tiny", ["a red circle"], [0], settings, on_step)
    return Deferred(job.future, completed)


@op("test-engine-batches", params=HeldParams, output=Value, queue="gpu")
def engine_batches(params: HeldParams, inputs: list, ctx: OpContext) -> Deferred:
    """A mapped item's one ``tiny`` image through the process's real engine, deferred as
    ``generate`` is, at ``steps + item % 3`` steps: items of one step count share a batch, so
    the engine holds one batch running and the others queued. Every denoising step waits until
    the test sets ``{tag}:gate``. Bodies are counted per process (``{tag}:bodies:{pid}``) and
    completions per item (``{tag}:completions:{item}``)."""
    import os

    import redis

    from genloop.workers.engine import ImageSettings

    (item,) = inputs
    r = redis.Redis.from_url(params.redis_url)
    r.incr(f"{params.tag}:bodies:{os.getpid()}")

    def on_step(done: int, total: int) -> None:
        r.set(f"{params.tag}:in-engine", os.getpid())
        while not r.exists(f"{params.tag}:gate"):
            time.sleep(0.02)

    def completed(images: list) -> Value:
        r.incr(f"{params.tag}:completions:{item.value}")
        return Value(value=item.value)

    settings = ImageSettings(steps=params.steps + item.value % 3, guidance=5.0, width=32,
                             height=32)
    job = ctx.resources.models.engine.submit("tiny", [f"item {item.value}"], [item.value],
                                             settings, on_step)
    return Deferred(job.future, completed)


@op("test-deferred-slow", params=CountParams, output=Value)
def deferred_slow(params: CountParams, inputs: list, ctx: OpContext) -> Deferred:
    """Work that finishes ``sleep`` s after the op returned, on another thread; bodies are logged
    as ``{node}:body`` and completions (its output made) as ``{node}:done``."""
    import threading
    from concurrent.futures import Future

    record(params.log, f"{ctx.node_id}:body")
    future: Future = Future()
    threading.Timer(params.sleep, future.set_result, [params.value]).start()

    def done(value: int) -> Value:
        record(params.log, f"{ctx.node_id}:done")
        return Value(value=value)

    return Deferred(future, done)
