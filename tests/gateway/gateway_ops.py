"""Ops the gateway tests use; imported by the test process and by Redis pool workers."""

from __future__ import annotations

import time

from pydantic import BaseModel

from genloop.sdk.ops import GenerationRequest
from genloop.workers import OpContext, op


class ImageParams(BaseModel):
    label: str
    n: int = 1
    sleep: float = 0.0


class Image(BaseModel):
    label: str
    artifact: str


@op("gw-image", params=ImageParams, output=Image)
def image(params: ImageParams, inputs: list, ctx: OpContext) -> list[Image]:
    """``n`` small distinct 'images' (bytes) stored as artifacts, after ``sleep`` seconds."""
    deadline = time.monotonic() + params.sleep
    while time.monotonic() < deadline:
        ctx.check_cancelled()
        time.sleep(0.01)
    return [
        Image(label=params.label,
              artifact=ctx.artifacts.put(f"{params.label}:{i}".encode(), "png"))
        for i in range(params.n)
    ]


class WaitParams(BaseModel):
    label: str = ""
    sleep: float = 0.0


class Waited(BaseModel):
    label: str


@op("gw-wait", params=WaitParams, output=Waited)
def wait(params: WaitParams, inputs: list, ctx: OpContext) -> Waited:
    """Sleeps (checking for cancel) and reports progress, so a run has events over time."""
    steps = max(1, int(params.sleep / 0.05))
    for i in range(steps):
        ctx.check_cancelled()
        time.sleep(params.sleep / steps)
        ctx.progress(i + 1, steps)
    return Waited(label=params.label)


class ShardParams(BaseModel):
    n: int = 1
    seed: int = 0
    shard_size: int = 4
    first: int = 0
    salt: str = ""
    ms: float = 10.0


class Made(BaseModel):
    index: int


@op("fair-image", params=ShardParams, output=Made, queue="gpu")
def fair_image(params: ShardParams, inputs: list, ctx: OpContext) -> list[Made]:
    """Shards like generate (4 images a message), ``ms`` per image: a 96-image run is 24
    messages that keep the gpu queue busy for a while."""
    time.sleep(params.n * params.ms / 1000)
    return [Made(index=params.first + i) for i in range(params.n)]


class PromptsParams(BaseModel):
    prompt: str
    n: int = 1


@op("gw-prompts", params=PromptsParams, output=GenerationRequest)
def prompts(params: PromptsParams, inputs: list, ctx: OpContext) -> list[GenerationRequest]:
    """``n`` generation requests: a fan-out no submit-time plan can count (it plans one)."""
    return [GenerationRequest(prompt=params.prompt, seed=i, round=1) for i in range(params.n)]
