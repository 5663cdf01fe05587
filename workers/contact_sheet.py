"""A contact sheet: every candidate of a loop, a row per round, scores under each image and the
best of each round framed. Plain PIL, so a person can judge a run at a glance."""

from __future__ import annotations

import io
from collections.abc import Callable

from PIL import Image, ImageDraw, ImageFont

from genloop.sdk.models import RoundSummary

TILE = 128
LABEL = 18
GAP = 6
BEST = (230, 60, 40)


def contact_sheet(rounds: list[RoundSummary], read: Callable[[str], bytes]) -> Image.Image:
    """Render ``rounds``; ``read(artifact_key)`` returns a candidate's PNG bytes."""
    columns = max((len(r.candidates) for r in rounds), default=1)
    header = 60
    width = header + columns * (TILE + GAP) + GAP
    height = len(rounds) * (TILE + LABEL + GAP) + GAP
    sheet = Image.new("RGB", (width, max(height, TILE)), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for row, summary in enumerate(rounds):
        y = GAP + row * (TILE + LABEL + GAP)
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
    return sheet
