"""What a campaign produced, as one JSON document (and a CSV view of it for spreadsheets)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

VariantStatus = Literal["pending", "running", "succeeded", "failed", "cancelled", "skipped"]


class FormatOutput(BaseModel):
    """One finished creative file."""

    file: str = Field(description="path relative to the campaign folder")
    method: Literal["crop", "pad", "generate"] = Field(
        description="'generate': drawn at the format's shape; 'crop'/'pad': fitted from the pick")
    source: str | None = Field(None, description="artifact key of the image it was made from")
    note: str | None = Field(None, description="why it was fitted although drawing was asked")
    contrast: float | None = Field(None, description="WCAG contrast of the headline, if any")
    panel: bool = Field(False, description="a backing panel was needed to reach 4.5:1")
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
    brand_compliance: float | None = None
    below_brand_minimum: bool = False
    finalist: bool = False
    formats: dict[str, FormatOutput] = Field(default_factory=dict)


class Manifest(BaseModel):
    name: str
    axes: dict[str, list[str]]
    formats: list[str]
    budget_images: int | None = None
    budget_steps: int | None = None
    spent_images: int = 0
    spent_steps: int = 0
    variants: list[VariantRecord]
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
    write_atomic(folder / "manifest.json", manifest.model_dump_json(indent=2))
    write_atomic(folder / "manifest.csv", manifest_csv(manifest))


def read_manifest(folder: Path) -> Manifest | None:
    path = folder / "manifest.json"
    return Manifest.model_validate_json(path.read_text()) if path.exists() else None


def manifest_csv(manifest: Manifest) -> str:
    axes = list(manifest.axes)
    columns = ["variant", *axes, "prompt", "status", "seed", "round", "score",
               "brand_compliance", "finalist", "images", "run_id", "error"]
    columns += [f"file:{f}" for f in manifest.formats]
    columns += [f"contrast:{f}" for f in manifest.formats]
    columns += [f"method:{f}" for f in manifest.formats]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for v in manifest.variants:
        files = [v.formats[f].file if f in v.formats else "" for f in manifest.formats]
        contrasts = [v.formats[f].contrast if f in v.formats else "" for f in manifest.formats]
        methods = [v.formats[f].method if f in v.formats else "" for f in manifest.formats]
        writer.writerow([v.key, *(v.values[a] for a in axes), v.prompt, v.status, v.seed,
                         v.round, v.score, v.brand_compliance, v.finalist, v.images, v.run_id,
                         v.error, *files, *contrasts, *methods])
    return buffer.getvalue()


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}
