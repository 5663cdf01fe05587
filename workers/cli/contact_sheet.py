"""A contact sheet: every candidate of a loop, a row per round, scores under each image and the
best of each round framed. Plain PIL, so a person can judge a run at a glance.

Given a ``verdict`` (for shapes prompts, the pixel checker's), each image also shows it beside
its score: "ok" in green, or the attributes it got wrong in red, so the sheet shows whether the
loop fixed what round 1 missed, by a judge the loop never optimised."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import NamedTuple

from PIL import Image, ImageDraw, ImageFont

from genloop.sdk.models import RoundSummary

TILE = 128
LABEL = 18
GAP = 6
BEST = (230, 60, 40)
RIGHT, WRONG = (20, 140, 40), (200, 30, 30)


class Verdict(NamedTuple):
    """A grader's word on one image: ``ok``, and a short label (what was wrong)."""

    ok: bool
    label: str


def contact_sheet(rounds: list[RoundSummary], read: Callable[[str], bytes],
                  verdict: Callable[[Image.Image], Verdict] | None = None) -> Image.Image:
    """Render ``rounds``; ``read(artifact_key)`` returns a candidate's PNG bytes, and
    ``verdict(image)``, if given, grades each image (a line under its score)."""
    columns = max((len(r.candidates) for r in rounds), default=1)
    header = 60
    width = header + columns * (TILE + GAP) + GAP
    label = LABEL * (2 if verdict else 1)
    height = len(rounds) * (TILE + label + GAP) + GAP
    sheet = Image.new("RGB", (width, max(height, TILE)), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for row, summary in enumerate(rounds):
        y = GAP + row * (TILE + label + GAP)
        draw.text((6, y + TILE // 2 - 6), f"round {summary.round}", fill="black", font=font)
        best_key = summary.best.artifact if summary.best else None
        for col, cand in enumerate(summary.candidates):
            x = header + GAP + col * (TILE + GAP)
            image = Image.open(io.BytesIO(read(cand.artifact))).convert("RGB")
            sheet.paste(image.resize((TILE, TILE), Image.Resampling.NEAREST), (x, y))
            if cand.artifact == best_key:
                draw.rectangle((x - 3, y - 3, x + TILE + 2, y + TILE + 2), outline=BEST, width=3)
            colour = BEST if cand.artifact == best_key else "black"
            draw.text((x, y + TILE + 3), f"{cand.score:.1f}  seed {cand.seed}", fill=colour,
                      font=font)
            if verdict is not None:
                said = verdict(image)
                draw.text((x, y + TILE + 3 + LABEL), said.label,
                          fill=RIGHT if said.ok else WRONG, font=font)
    return sheet
