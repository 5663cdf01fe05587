"""Finished creatives: a variant's best image fitted to a placement format, with its headline.

Fitting never stretches. The image is cropped to the format's aspect ratio around its subject,
keeping a safe margin on every side; when the subject with its margin does not fit inside any such
crop, the image is padded with its own background colour instead. Then it is scaled uniformly.

The headline goes where the picture is calmest (lowest luminance spread), in black or white,
whichever contrasts more. Contrast is measured as WCAG 2 defines it, against the actual pixels
behind the text block, at their worst (the 5th-percentile pixel, so one stray dark speck does not
decide); when no place reaches 4.5:1 a backing panel is drawn behind the text and the contrast is
measured again on the composited image.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from PIL import Image, ImageChops, ImageDraw, ImageFont

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
    canvas = Image.new("RGB", (round(pw), round(ph)), bg)
    canvas.paste(src, (round((pw - w) / 2), round((ph - h) / 2)))
    out = canvas.resize((width, height), Image.Resampling.LANCZOS)
    return Fitted(out, "pad", (-(pw - w) / 2, -(ph - h) / 2, (pw + w) / 2, (ph + h) / 2))


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


def _layouts(w: int, h: int, margin: int, line_h: int, lines_for) -> list[tuple[Box, list[str]]]:
    """Where a text block may go: full-width bands at the top, middle and bottom, and on
    landscape pictures also the left and right halves, each with its text wrapped to fit."""
    areas = [(margin, margin, w - margin, h - margin)]
    if w > h:
        areas += [(margin, margin, w // 2 - margin // 2, h - margin),
                  (w // 2 + margin // 2, margin, w - margin, h - margin)]
    layouts = []
    for i, (x0, y0, x1, y1) in enumerate(areas):
        lines = lines_for(x1 - x0)
        block = min(y1 - y0, line_h * len(lines) + margin)
        tops = (y0, (y0 + y1 - block) // 2, y1 - block) if i == 0 else ((y0 + y1 - block) // 2,)
        for top in tops:
            box = (x0 - margin // 2, max(0, top - margin // 2), x1 + margin // 2,
                   min(h, top + block))
            layouts.append((box, lines))
    return layouts


def set_headline(image: Image.Image, text: str, cta: str | None = None) -> Headline:
    """``image`` with ``text`` (and ``cta`` below it) set where it reads best."""
    out = image.convert("RGB")
    w, h = out.size
    draw = ImageDraw.Draw(out)
    size = max(10, min(w, h) // 12)
    font, cta_font = _font(size), _font(max(8, size * 3 // 4))
    margin = max(4, min(w, h) // 24)
    line_h = int(size * 1.25)

    def lines_for(width: int) -> list[str]:
        return _wrap(text, font, width, draw) + ([cta] if cta else [])

    layouts = sorted(_layouts(w, h, margin, line_h, lines_for),
                     key=lambda layout: _luminance_spread(out, layout[0]))
    colours: tuple[RGB, RGB] = ((255, 255, 255), (0, 0, 0))
    chosen: tuple[Box, list[str], RGB, float] | None = None
    for box, lines in layouts:  # calmest first; the first that reads well wins
        colour = max(colours, key=lambda c: _worst_contrast(out, box, c))
        contrast = _worst_contrast(out, box, colour)
        if contrast >= MIN_CONTRAST:
            chosen = (box, lines, colour, contrast)
            break
    panel = chosen is None
    if chosen is None:
        box, lines = layouts[0]
        colour = max(colours, key=lambda c: _worst_contrast(out, box, c))
        backing = (0, 0, 0) if colour == (255, 255, 255) else (255, 255, 255)
        for alpha in (0.8, 1.0):
            trial = out.copy()
            mask = Image.new("L", out.size, 0)
            ImageDraw.Draw(mask).rectangle(box, fill=round(255 * alpha))
            trial.paste(Image.new("RGB", out.size, backing), (0, 0), mask)
            contrast = _worst_contrast(trial, box, colour)
            if contrast >= MIN_CONTRAST:
                break
        out, chosen = trial, (box, lines, colour, contrast)
        draw = ImageDraw.Draw(out)
    box, lines, colour, contrast = chosen
    y = box[1] + margin // 2
    for i, line in enumerate(lines):
        line_font = cta_font if cta and i == len(lines) - 1 else font
        x = (box[0] + box[2] - draw.textlength(line, font=line_font)) / 2
        draw.text((x, y), line, fill=colour, font=line_font)
        y += line_h
    return Headline(out, box, colour, round(contrast, 2), panel)
