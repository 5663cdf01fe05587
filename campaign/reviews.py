"""Review decisions on a campaign's variants: approve, reject, comment, kept with the campaign.

Decisions are appended to ``reviews.jsonl`` in the campaign folder (one line each, the latest
per variant wins), a file the runner never rewrites: a re-run keeps every decision, and each
variant's current one is copied into the manifest (``VariantRecord.review``). The console's
campaign page writes them; an export takes the approved variants' creatives.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

REVIEWS_FILE = "reviews.jsonl"
Decision = Literal["approved", "rejected", "pending"]


class Review(BaseModel):
    """A variant's current decision and comment, who gave it and when."""

    decision: Decision = "pending"
    comment: str = Field("", max_length=2000)
    by: str | None = None
    at: float | None = None


class _Line(Review):
    key: str


def read_reviews(folder: Path) -> dict[str, Review]:
    """Each reviewed variant's latest decision (lines a crash cut short are skipped)."""
    path = folder / REVIEWS_FILE
    reviews: dict[str, Review] = {}
    if not path.exists():
        return reviews
    for raw in path.read_text().splitlines():
        try:
            line = _Line.model_validate_json(raw)
        except ValidationError:
            continue
        reviews[line.key] = Review.model_validate(line.model_dump(exclude={"key"}))
    return reviews


def record_review(folder: Path, key: str, decision: Decision, comment: str,
                  by: str) -> Review:
    """Append a decision on variant ``key``; returns it."""
    line = _Line(key=key, decision=decision, comment=comment, by=by, at=time.time())
    path = folder / REVIEWS_FILE
    torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with path.open("a") as f:
        f.write(("\n" if torn else "") + line.model_dump_json() + "\n")
    return Review.model_validate(line.model_dump(exclude={"key"}))
