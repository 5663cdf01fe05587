"""Finished creatives: a variant's best image fitted to a placement format, with its headline.

Fitting never stretches. The image is cropped to the format's aspect ratio around its subject,
keeping a safe margin on every side; when the subject with its margin does not fit inside any such
crop, the image is padded instead, its edges mirrored outward (:func:`continued`). Then it is
scaled uniformly.

The headline never covers the subject while any place is free of it (smaller type before that),
and goes where the picture is calmest (lowest luminance spread), in black or white,
whichever contrasts more. Contrast is measured as WCAG 2 defines it, against the actual pixels
behind the text block, at their worst (the 5th-percentile pixel, so one stray dark speck does not
decide); when no place reaches 4.5:1 a backing panel is drawn behind the text and the contrast is
measured again on the composited image.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from PIL import Image, ImageChops, ImageDraw, ImageFont

from .brand import subject_mask

RGB = tuple[int, int, int]
Box = tuple[int, int, int, int]
#: WCAG 2 AA for normal text.
MIN_CONTRAST = 4.5
#: Pixels that differ from the background by more than this (0..255, any channel) are subject.
SUBJECT_TOLERANCE = 40


def background_colour(image: Image.Image) -> RGB:
    """The median colour of the image's border pixels."""
    rgb = image.convert("RGB")
    w, h = rgb.size
    px = rgb.load()
    border = [px[x, y] for x in range(w) for y in (0, h - 1)]
    border += [px[x, y] for y in range(h) for x in (0, w - 1)]
    return tuple(int(median(c[i] for c in border)) for i in range(3))  # type: ignore[return-value]


def subject_box(image: Image.Image, background: RGB | None = None) -> Box | None:
    """Bounding box of the pixels that stand out from the background, or ``None``."""
    rgb = image.convert("RGB")
    bg = Image.new("RGB", rgb.size, background or background_colour(rgb))
    diff = ImageChops.difference(rgb, bg)
    mask = ImageChops.lighter(ImageChops.lighter(*diff.split()[:2]), diff.split()[2])
    return mask.point(lambda v: 255 if v > SUBJECT_TOLERANCE else 0).getbbox()


@dataclass(frozen=True)
class Fitted:
    image: Image.Image
    method: str  # "crop" or "pad"
    window: tuple[float, float, float, float]  # the region of the source that was kept


def fit(image: Image.Image, width: int, height: int, safe_area: float = 0.08) -> Fitted:
    """``image`` at ``width`` x ``height``, cropped around its subject or padded, never stretched.

    ``safe_area`` is the margin kept around the subject, as a share of the crop's size.
    """
    src = image.convert("RGB")
    w, h = src.size
    aspect = width / height
    cw, ch = (h * aspect, float(h)) if w / h > aspect else (float(w), w / aspect)
    bg = background_colour(src)
    box = subject_box(src, bg) or (0, 0, w, h)
    mx, my = safe_area * cw, safe_area * ch
    need_w, need_h = box[2] - box[0] + 2 * mx, box[3] - box[1] + 2 * my
    if need_w <= cw + 1e-6 and need_h <= ch + 1e-6:
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        left = min(max(cx - cw / 2, 0.0), w - cw)
        top = min(max(cy - ch / 2, 0.0), h - ch)
        window = (left, top, left + cw, top + ch)
        out = src.resize((width, height), Image.Resampling.LANCZOS, box=window)
        return Fitted(out, "crop", window)
    # Pad: the smallest canvas of the format's aspect that holds the whole image.
    pw, ph = (h * aspect, float(h)) if w / h < aspect else (float(w), w / aspect)
    canvas = continued(src, round(pw), round(ph))
    out = canvas.resize((width, height), Image.Resampling.LANCZOS)
    return Fitted(out, "pad", (-(pw - w) / 2, -(ph - h) / 2, (pw + w) / 2, (ph + h) / 2))


#: Share of the picture's side whose edge strip is mirrored into the padding.
EDGE_STRIP = 0.08


def continued(src: Image.Image, width: int, height: int) -> Image.Image:
    """``src`` centred on a ``width`` x ``height`` canvas whose margins continue its edges: each
    margin is the picture's edge strip mirrored outward, again and again, so colour and
    texture carry on across the seam (a flat fill in the border's median colour showed a seam
    wherever the background was noisy). The strip is thin, :data:`EDGE_STRIP` of the side, so
    a subject that reaches the edge is repeated no more than that."""
    w, h = src.size
    x0, y0 = (width - w) // 2, (height - h) // 2
    canvas = Image.new("RGB", (width, height))
    canvas.paste(src, (x0, y0))
    if height > h:
        band = max(1, round(h * EDGE_STRIP))
        top, bottom = src.crop((0, 0, w, band)), src.crop((0, h - band, w, h))
        for k in range(-(-max(y0, height - h - y0) // band)):
            flip = k % 2 == 0
            canvas.paste(top.transpose(Image.Transpose.FLIP_TOP_BOTTOM) if flip else top,
                         (x0, y0 - (k + 1) * band))
            canvas.paste(bottom.transpose(Image.Transpose.FLIP_TOP_BOTTOM) if flip else bottom,
                         (x0, y0 + h + k * band))
    if width > w:
        band = max(1, round(w * EDGE_STRIP))
        left, right = src.crop((0, 0, band, h)), src.crop((w - band, 0, w, h))
        for k in range(-(-max(x0, width - w - x0) // band)):
            flip = k % 2 == 0
            canvas.paste(left.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else left,
                         (x0 - (k + 1) * band, y0))
            canvas.paste(right.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else right,
                         (x0 + w + k * band, y0))
    return canvas


def relative_luminance(rgb: RGB) -> float:
    """WCAG 2 relative luminance of an sRGB colour."""

    def channel(c: int) -> float:
        v = c / 255.0
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: float, b: float) -> float:
    """WCAG contrast of two relative luminances (1..21)."""
    hi, lo = max(a, b), min(a, b)
    return (hi + 0.05) / (lo + 0.05)


def _luminances(image: Image.Image, box: Box) -> list[float]:
    """Luminance of the pixels in ``box``, sampled (nearest, not averaged) to at most ~4k of
    them: averaging would hide exactly the dark or bright pixels that spoil contrast."""
    region = image.crop(box).convert("RGB")
    step = max(1, int((region.width * region.height / 4096) ** 0.5))
    if step > 1:
        region = region.resize((max(1, region.width // step), max(1, region.height // step)),
                               Image.Resampling.NEAREST)
    data = region.tobytes()
    return [relative_luminance((data[i], data[i + 1], data[i + 2]))
            for i in range(0, len(data), 3)]


def _worst_contrast(image: Image.Image, box: Box, text: RGB) -> float:
    text_l = relative_luminance(text)
    contrasts = sorted(contrast_ratio(v, text_l) for v in _luminances(image, box))
    return contrasts[len(contrasts) // 20]


def _luminance_spread(image: Image.Image, box: Box) -> float:
    values = _luminances(image, box)
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


@dataclass(frozen=True)
class Headline:
    image: Image.Image
    box: Box  # the text block, panel included
    colour: RGB
    contrast: float
    panel: bool
    overlap: float  # share of the subject's pixels under the box: 0 unless nowhere was free


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    # Pillow ships a scalable default font (Aileron) when built with FreeType.
    return ImageFont.load_default(size=size)


def _wrap(text: str, font, width: int, draw: ImageDraw.ImageDraw) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        trial = f"{lines[-1]} {word}" if lines else word
        if lines and draw.textlength(trial, font=font) <= width:
            lines[-1] = trial
        else:
            lines.append(word)
    return lines or [""]


def _layouts(w: int, h: int, margin: int, line_h: int, lines_for,
             halves: bool) -> list[tuple[Box, list[str]]]:
    """Where a text block may go: full-width bands at the top, middle and bottom, and on
    landscape pictures (or with ``halves``) the left and right halves at the same heights,
    each with its text wrapped to fit."""
    areas = [(margin, margin, w - margin, h - margin)]
    if w > h or halves:
        areas += [(margin, margin, w // 2 - margin // 2, h - margin),
                  (w // 2 + margin // 2, margin, w - margin, h - margin)]
    layouts = []
    for x0, y0, x1, y1 in areas:
        lines = lines_for(x1 - x0)
        block = min(y1 - y0, line_h * len(lines) + margin)
        for top in (y0, (y0 + y1 - block) // 2, y1 - block):
            box = (x0 - margin // 2, max(0, top - margin // 2), x1 + margin // 2,
                   min(h, top + block))
            layouts.append((box, lines))
    return layouts


#: Type sizes tried, as shares of the first (a twelfth of the shorter side), before a headline
#: may cover any of the subject.
TYPE_SCALES = (1.0, 0.8, 0.64)


def _covered(mask: Image.Image, box: Box) -> int:
    """Subject pixels under ``box``."""
    return mask.crop(box).histogram()[255]


def set_headline(image: Image.Image, text: str, cta: str | None = None) -> Headline:
    """``image`` with ``text`` (and ``cta`` below it) set where it reads best, never over the
    subject (:func:`~.brand.subject_mask`) while any place is free of it: the calmest free
    place whose black or white text reaches 4.5:1, else the calmest free place on a panel;
    halves of a portrait picture are tried after its bands, and type shrinks
    (:data:`TYPE_SCALES`) before any subject pixel is covered, and only when no
    size finds a free place does it go, on a panel, where it covers the least."""
    out = image.convert("RGB")
    w, h = out.size
    draw = ImageDraw.Draw(out)
    mask = subject_mask(out)
    subject = max(1, mask.histogram()[255])
    margin = max(4, min(w, h) // 24)
    for scale in TYPE_SCALES:
        size = max(10, round(min(w, h) // 12 * scale))
        font, cta_font = _font(size), _font(max(8, size * 3 // 4))
        line_h = int(size * 1.25)

        def lines_for(width: int, font: ImageFont.ImageFont | ImageFont.FreeTypeFont = font
                      ) -> list[str]:
            return _wrap(text, font, width, draw) + ([cta] if cta else [])

        # On a portrait picture a half wraps a headline into a narrow column: only when every
        # band covers the subject.
        for halves in (False, True):
            layouts = _layouts(w, h, margin, line_h, lines_for, halves)
            free = [layout for layout in layouts if not _covered(mask, layout[0])]
            if free:
                break
        if free:
            break
    if not free:  # nowhere clear of the subject at any size: the least covered place
        least = min(_covered(mask, box) for box, _ in layouts)
        free = [layout for layout in layouts if _covered(mask, layout[0]) == least]
    free.sort(key=lambda layout: _luminance_spread(out, layout[0]))
    colours: tuple[RGB, RGB] = ((255, 255, 255), (0, 0, 0))
    chosen: tuple[Box, list[str], RGB, float] | None = None
    for box, lines in free:  # calmest first; the first that reads well wins
        colour = max(colours, key=lambda c: _worst_contrast(out, box, c))
        contrast = _worst_contrast(out, box, colour)
        if contrast >= MIN_CONTRAST:
            chosen = (box, lines, colour, contrast)
            break
    overlap = _covered(mask, free[0][0])
    panel = chosen is None or overlap > 0
    if panel:
        box, lines = chosen[:2] if chosen else free[0]
        colour = max(colours, key=lambda c: _worst_contrast(out, box, c))
        out, contrast = _panel(out, box, colour)
        chosen = (box, lines, colour, contrast)
        draw = ImageDraw.Draw(out)
    box, lines, colour, contrast = chosen  # type: ignore[misc]
    y = box[1] + margin // 2
    for i, line in enumerate(lines):
        line_font = cta_font if cta and i == len(lines) - 1 else font
        x = (box[0] + box[2] - draw.textlength(line, font=line_font)) / 2
        draw.text((x, y), line, fill=colour, font=line_font)
        y += line_h
    return Headline(out, box, colour, round(contrast, 2), panel,
                    round(_covered(mask, box) / subject, 4))


def _panel(image: Image.Image, box: Box, colour: RGB) -> tuple[Image.Image, float]:
    """``image`` with a backing panel behind ``box``, 80% opaque if that reaches 4.5:1, and the
    contrast it gives."""
    backing = (0, 0, 0) if colour == (255, 255, 255) else (255, 255, 255)
    for alpha in (0.8, 1.0):
        trial = image.copy()
        mask = Image.new("L", image.size, 0)
        ImageDraw.Draw(mask).rectangle(box, fill=round(255 * alpha))
        trial.paste(Image.new("RGB", image.size, backing), (0, 0), mask)
        contrast = _worst_contrast(trial, box, colour)
        if contrast >= MIN_CONTRAST:
            break
    return trial, contrast
