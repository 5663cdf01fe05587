"""From finished runs to creatives: each variant's pick, brand compliance, finalists, formats."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from genloop.evaluators.palette import palette_compliance, parse_colour
from genloop.evaluators.selection import select_top_k, select_top_k_diverse
from genloop.sdk import RunResult, ScoredCandidate

from .creative import fit, set_headline
from .manifest import FormatOutput, Manifest, VariantRecord
from .spec import CampaignSpec

Read = Callable[[str], bytes]


def _image(read: Read, key: str) -> Image.Image:
    return Image.open(io.BytesIO(read(key))).convert("RGB")


def pick(spec: CampaignSpec, result: RunResult, read: Read) -> ScoredCandidate | None:
    """The variant's best candidate: by its score, plus the brand weight times its compliance."""
    scored = result.scored
    if not scored or spec.brand is None or spec.brand.weight == 0:
        return result.best
    palette = [parse_colour(c) for c in spec.brand.palette]

    def value(c: ScoredCandidate) -> float:
        share = palette_compliance(_image(read, c.artifact), palette, spec.brand.max_distance)
        return c.score + spec.brand.weight * share

    return max(scored, key=value)


def mark_brand(spec: CampaignSpec, record: VariantRecord, read: Read) -> None:
    if spec.brand is None or record.artifact is None:
        return
    palette = [parse_colour(c) for c in spec.brand.palette]
    share = palette_compliance(_image(read, record.artifact), palette, spec.brand.max_distance)
    record.brand_compliance = round(share, 4)
    record.below_brand_minimum = share < spec.brand.min_compliance


def mark_finalists(spec: CampaignSpec, records: list[VariantRecord],
                   picks: dict[str, ScoredCandidate]) -> None:
    """Per value of the product axis, ``spec.finalists`` variants, diverse by their images."""
    groups: dict[str, list[VariantRecord]] = {}
    for r in records:
        if r.key in picks and not r.below_brand_minimum:
            groups.setdefault(r.values[spec.product_axis], []).append(r)
    for members in groups.values():
        scores = [picks[r.key].score for r in members]
        embeddings = [picks[r.key].embedding for r in members]
        if all(e is not None for e in embeddings) and spec.diversity > 0:
            chosen = select_top_k_diverse(scores, embeddings, spec.finalists,  # type: ignore[arg-type]
                                          spec.diversity)
        else:
            chosen = select_top_k(scores, spec.finalists)
        for i in chosen:
            members[i].finalist = True


def render_formats(spec: CampaignSpec, record: VariantRecord, folder: Path, read: Read,
                   previous: VariantRecord | None) -> None:
    """Write the variant's pick in every format; files made from the same inputs are kept."""
    if record.artifact is None:
        return
    source: Image.Image | None = None
    cta = spec.copy_.cta if spec.copy_ else None
    for fmt in spec.formats:
        what = f"{record.artifact}|{fmt.width}x{fmt.height}|{record.headline}|{cta}"
        render_key = hashlib.sha256(what.encode()).hexdigest()[:16]
        file = f"formats/{fmt.slug}/{record.key}.png"
        old = previous.formats.get(fmt.name) if previous else None
        if old is not None and old.render_key == render_key and (folder / file).exists():
            record.formats[fmt.name] = old
            continue
        source = source or _image(read, record.artifact)
        fitted = fit(source, fmt.width, fmt.height)
        image, contrast, panel = fitted.image, None, False
        if record.headline:
            placed = set_headline(image, record.headline, cta)
            image, contrast, panel = placed.image, placed.contrast, placed.panel
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        image.save(folder / file)
        record.formats[fmt.name] = FormatOutput(file=file, method=fitted.method,
                                                contrast=contrast, panel=panel,
                                                render_key=render_key)


TILE, LABEL = 160, 34


def contact_sheets(manifest: Manifest, spec: CampaignSpec, folder: Path, read: Read,
                   previous: dict[str, str]) -> dict[str, str]:
    """One PNG per value of the product axis: each variant's pick, finalists framed.

    Returns ``{file: key}``; a sheet whose key (what it shows) is in ``previous`` and whose file
    exists is not drawn again, so collecting a finished campaign again costs next to nothing.
    """
    sheets = {}
    font = ImageFont.load_default(size=11)
    for product in spec.axes[spec.product_axis]:
        members = [v for v in manifest.variants
                   if v.values[spec.product_axis] == product and v.artifact]
        if not members:
            continue
        slug = "".join(ch if ch.isalnum() else "-" for ch in product).strip("-")[:40] or "product"
        file = f"sheets/{slug}.png"
        what = "|".join(f"{v.key}:{v.artifact}:{v.finalist}:{v.score}" for v in members)
        key = hashlib.sha256(what.encode()).hexdigest()[:16]
        sheets[file] = key
        if previous.get(file) == key and (folder / file).exists():
            continue
        cols = min(6, len(members))
        rows = -(-len(members) // cols)
        sheet = Image.new("RGB", (cols * (TILE + 8) + 8, rows * (TILE + LABEL + 8) + 8), "white")
        draw = ImageDraw.Draw(sheet)
        for i, v in enumerate(members):
            x, y = 8 + (i % cols) * (TILE + 8), 8 + (i // cols) * (TILE + LABEL + 8)
            sheet.paste(_image(read, v.artifact).resize((TILE, TILE)), (x, y))  # type: ignore[arg-type]
            if v.finalist:
                draw.rectangle((x - 3, y - 3, x + TILE + 2, y + TILE + 2), outline=(230, 60, 40),
                               width=3)
            others = ", ".join(val for axis, val in v.values.items()
                               if axis != spec.product_axis)
            draw.text((x, y + TILE + 3), others[:28], fill="black", font=font)
            draw.text((x, y + TILE + 17), f"{v.score:.1f}", fill="black", font=font)
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        sheet.save(folder / file, compress_level=1)
    return sheets
