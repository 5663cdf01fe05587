"""``typed-make``: declares its output model, defined here."""

from __future__ import annotations

from pydantic import BaseModel

from genloop.workers import OpContext, op


class Made(BaseModel):
    value: int


@op("typed-make", output=Made)
def make(params, inputs: list, ctx: OpContext) -> list[Made]:
    return [Made(value=1), Made(value=2)]
