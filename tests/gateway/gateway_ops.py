"""Ops the gateway tests use; imported by the test process and by Redis pool workers."""

from __future__ import annotations

import time

from pydantic import BaseModel

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
