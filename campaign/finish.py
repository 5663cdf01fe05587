"""From finished runs to creatives: each variant's brand compliance, finalists, formats.

A variant's pick is the best-scored candidate of its loop; with a brand weight the loop already
scored brand colours (see ``CampaignSpec.loop_for``), so nothing here re-ranks or re-reads the
candidates. The pick is decoded at most once per variant (:class:`Source`), and not at all when
its creatives and compliance are already on disk from an earlier collection.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from genloop.evaluators.palette import parse_colour
from genloop.evaluators.selection import select_top_k, select_top_k_diverse
from genloop.sdk import ScoredCandidate

from .brand import subject_compliance
from .creative import fit, set_headline
from .manifest import FormatOutput, Manifest, VariantRecord
from .spec import CampaignSpec

Read = Callable[[str], bytes]
#: Part of each creative's render key: changed when fitting or headline placement changes, so
#: files an older version made are drawn again (2: headlines clear of the subject, padding
#: mirrored; 3: a headline no band or half clears goes anywhere clear of the subject).
RENDERING = 3


def _image(read: Read, key: str) -> Image.Image:
    return Image.open(io.BytesIO(read(key))).convert("RGB")


class Source:
    """A variant's pick, read and decoded on first use only, then kept."""

    def __init__(self, read: Read, key: str) -> None:
        self.read, self.key = read, key
        self._image: Image.Image | None = None

    @property
    def image(self) -> Image.Image:
        if self._image is None:
            self._image = _image(self.read, self.key)
        return self._image


def mark_brand(spec: CampaignSpec, record: VariantRecord, source: Source,
               previous: VariantRecord | None) -> None:
    """The pick's brand compliance, its subject's colours against the palette (:mod:`.brand`);
    kept from ``previous`` when it measured the same image the same way."""
    if spec.brand is None or record.artifact is None:
        return
    if (previous is not None and previous.artifact == record.artifact
            and previous.brand_compliance is not None and previous.brand_subject is not None):
        share, subject = previous.brand_compliance, previous.brand_subject
    else:
        palette = [parse_colour(c) for c in spec.brand.palette]
        measured = subject_compliance(source.image, palette, spec.brand.max_distance)
        share, subject = round(measured.share, 4), measured.subject
    record.brand_compliance, record.brand_subject = share, subject
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


def render_formats(spec: CampaignSpec, record: VariantRecord, folder: Path, source: Source,
                   previous: VariantRecord | None, drawn: dict[str, str] | None = None,
                   errors: dict[str, str] | None = None) -> None:
    """Write the variant's pick in every format; files made from the same inputs are kept.

    ``drawn`` maps a format to the artifact drawn at its shape (:mod:`.reframe`): that image is
    fitted instead of the pick (a uniform scale, and a crop of the few pixels that rounding to
    multiples of 8 left). A format in ``errors`` could not be drawn: the pick is cropped or
    padded, and the error noted.
    """
    if record.artifact is None:
        return
    drawn, errors = drawn or {}, errors or {}
    cta = spec.copy_.cta if spec.copy_ else None
    for fmt in spec.formats:
        artifact = drawn.get(fmt.name, record.artifact)
        what = f"{RENDERING}|{artifact}|{fmt.width}x{fmt.height}|{record.headline}|{cta}"
        render_key = hashlib.sha256(what.encode()).hexdigest()[:16]
        file = f"formats/{fmt.slug}/{record.key}.png"
        old = previous.formats.get(fmt.name) if previous else None
        if old is not None and old.render_key == render_key and (folder / file).exists():
            record.formats[fmt.name] = old
            continue
        image = (_image(source.read, artifact) if fmt.name in drawn else source.image)
        fitted = fit(image, fmt.width, fmt.height)
        image, contrast, panel, overlap = fitted.image, None, False, None
        if record.headline:
            placed = set_headline(image, record.headline, cta)
            image, contrast, panel = placed.image, placed.contrast, placed.panel
            overlap = placed.overlap
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        image.save(folder / file)
        record.formats[fmt.name] = FormatOutput(
            file=file, method="generate" if fmt.name in drawn else fitted.method,
            source=artifact, contrast=contrast, panel=panel, overlap=overlap,
            render_key=render_key,
            note=errors.get(fmt.name))


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
