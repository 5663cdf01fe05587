"""``typed-check``: reports the type of each input item it got (it never imports the producer)."""

from __future__ import annotations

from pydantic import BaseModel

from genloop.workers import OpContext, op


class CheckParams(BaseModel):
    tag: str = ""


class Seen(BaseModel):
    type: str


@op("typed-check", params=CheckParams, output=Seen)
def check(params: CheckParams, inputs: list, ctx: OpContext) -> list[Seen]:
    return [Seen(type=f"{type(i).__module__}.{type(i).__qualname__}") for i in inputs]
