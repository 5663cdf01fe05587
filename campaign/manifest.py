"""What a campaign produced: ``manifest.json`` (the campaign's totals and where its variants
are), its variants as JSON Lines in shards of :data:`SHARD` (``variants/00000.jsonl`` ...), and
``manifest.csv``, one row a variant, for spreadsheets.

Everything is written a variant at a time, so time and memory grow linearly and no one file grows
past a couple of MB however large the campaign (one manifest.json of 10^6 variants was 652 MB).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from .reviews import Review
from .runlog import Attempt

#: Variants per JSON Lines shard: about 1.5 MB with three formats.
SHARD = 1000

VariantStatus = Literal["pending", "running", "succeeded", "failed", "cancelled", "skipped"]


class FormatOutput(BaseModel):
    """One finished creative file."""

    file: str = Field(description="path relative to the campaign folder")
    method: Literal["crop", "pad", "generate"] = Field(
        description="'generate': drawn at the format's shape; 'crop'/'pad': fitted from the pick")
    source: str | None = Field(None, description="artifact key of the image it was made from")
    note: str | None = Field(None, description="why it was fitted although drawing was asked")
    contrast: float | None = Field(None, description="WCAG contrast of the headline, if any")
    panel: bool = Field(False, description="a backing panel was needed to reach 4.5:1, or "
                        "the headline covers some of the subject")
    overlap: float | None = Field(
        None, description="share of the subject's pixels under the headline: 0 unless no place "
        "was free of it")
    render_key: str = Field(description="hash of what the file was made from; reused if equal")


class VariantRecord(BaseModel):
    """One variant: its axis values, its run and its best image in every format."""

    key: str
    values: dict[str, str]
    prompt: str
    headline: str | None = None
    run_id: str | None = None
    status: VariantStatus = "pending"
    error: str | None = None
    images: int = Field(0, description="images the variant generated (loop and formats)")
    steps: int = Field(0, description="denoising steps those images took")
    seed: int | None = None
    round: int | None = None
    score: float | None = None
    artifact: str | None = None
    brand_compliance: float | None = Field(
        None, description="share of the subject's pixels in brand colours (campaign.brand)")
    brand_subject: float | None = Field(
        None, description="share of the picture measured as subject (1.0: none stood out)")
    below_brand_minimum: bool = False
    finalist: bool = False
    formats: dict[str, FormatOutput] = Field(default_factory=dict)
    review: Review | None = Field(None, description="the reviewers' decision and comment")
    history: list[Attempt] = Field(
        default_factory=list, description="earlier runs, replaced by --retry-failed, oldest first")


class Manifest(BaseModel):
    name: str
    axes: dict[str, list[str]]
    formats: list[str]
    budget_images: int | None = None
    budget_steps: int | None = None
    spent_images: int = 0
    spent_steps: int = 0
    brand_palette: list[str] = Field(default_factory=list)
    brand_min_compliance: float | None = None
    brand_max_distance: float | None = Field(
        None, description="delta E within which a subject pixel counts as a palette colour")
    variants: list[VariantRecord] = Field(
        default_factory=list, description="in memory; on disk in the files of variant_files")
    variant_files: list[str] = Field(
        default_factory=list, description="the JSON Lines shards that hold the variants, in order")
    sheets: dict[str, str] = Field(
        default_factory=dict, description="contact sheet file -> hash of what it shows")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.variants:
            out[v.status] = out.get(v.status, 0) + 1
        return out


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` so that a reader (or a crash) never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_manifest(manifest: Manifest, folder: Path) -> None:
    """Write the variant shards, the CSV, then ``manifest.json`` (which names the shards)."""
    shards = folder / "variants"
    shards.mkdir(exist_ok=True)
    manifest.variant_files = []
    for start in range(0, len(manifest.variants), SHARD):
        name = f"variants/{start // SHARD:05d}.jsonl"
        _write_lines(folder / name, (v.model_dump_json() + "\n"
                                     for v in manifest.variants[start:start + SHARD]))
        manifest.variant_files.append(name)
    for stale in set(shards.glob("*.jsonl")) - {folder / n for n in manifest.variant_files}:
        stale.unlink()
    _write_lines(folder / "manifest.csv", _csv_rows(manifest))
    write_atomic(folder / "manifest.json", manifest.model_dump_json(indent=2, exclude={"variants"}))


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` as they come, atomically (like :func:`write_atomic`)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        f.writelines(lines)
    os.replace(tmp, path)


def read_manifest(folder: Path) -> Manifest | None:
    path = folder / "manifest.json"
    if not path.exists():
        return None
    manifest = Manifest.model_validate_json(path.read_text())
    for name in manifest.variant_files:
        with (folder / name).open() as f:
            manifest.variants += [VariantRecord.model_validate_json(line) for line in f]
    return manifest


CSV_FIXED = ["variant", "prompt", "headline", "status", "seed", "round", "score",
             "brand_compliance", "below_brand_minimum", "finalist", "images", "steps", "run_id",
             "error"]


#: First characters a spreadsheet reads as a formula (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: object) -> object:
    """A text cell that a spreadsheet would run as a formula (``=HYPERLINK(...)`` from an axis
    value) gets a leading ``'``, which shows it as text; numbers and other text are as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv_rows(manifest: Manifest) -> Iterator[str]:
    axes = list(manifest.axes)
    columns = [CSV_FIXED[0], *axes, *CSV_FIXED[1:]]
    columns += [f"file:{f}" for f in manifest.formats]
    columns += [f"contrast:{f}" for f in manifest.formats]
    columns += [f"method:{f}" for f in manifest.formats]
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def row(values: list) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([spreadsheet_safe(v) for v in values])
        return buffer.getvalue()

    yield row(columns)
    for v in manifest.variants:
        files = [v.formats[f].file if f in v.formats else "" for f in manifest.formats]
        contrasts = [v.formats[f].contrast if f in v.formats else "" for f in manifest.formats]
        methods = [v.formats[f].method if f in v.formats else "" for f in manifest.formats]
        yield row([v.key, *(v.values[a] for a in axes), v.prompt, v.headline, v.status, v.seed,
                   v.round, v.score, v.brand_compliance, v.below_brand_minimum, v.finalist,
                   v.images, v.steps, v.run_id, v.error, *files, *contrasts, *methods])
