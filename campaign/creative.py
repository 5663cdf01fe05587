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

from array import array
from dataclasses import dataclass
from statistics import median
from typing import cast

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
    if px is None:
        raise ValueError("Pillow gave no pixel access to an RGB image")
    # An "RGB" image's pixels are (r, g, b); Pillow types any image's pixel as float | tuple.
    border = [cast(RGB, px[x, y]) for x in range(w) for y in (0, h - 1)]
    border += [cast(RGB, px[x, y]) for y in range(h) for x in (0, w - 1)]
    r, g, b = (int(median(c[i] for c in border)) for i in range(3))
    return r, g, b


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


Font = ImageFont.FreeTypeFont | ImageFont.ImageFont


def _font(size: int) -> Font:
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


def _layouts(w: int, h: int, margin: int, line_h: int, lines_for, widest,
             halves: bool) -> list[tuple[Box, list[str]]]:
    """Where a text block may go: full-width bands at the top, middle and bottom, and on
    landscape pictures (or with ``halves``) the left and right halves at the same heights,
    each with its text wrapped to fit (an area narrower than a word of it is left out)."""
    areas = [(margin, margin, w - margin, h - margin)]
    if w > h or halves:
        areas += [(margin, margin, w // 2 - margin // 2, h - margin),
                  (w // 2 + margin // 2, margin, w - margin, h - margin)]
    layouts = []
    for x0, y0, x1, y1 in areas:
        lines = lines_for(x1 - x0)
        if widest(lines) > x1 - x0 + margin:  # a word wider than the area would spill out
            continue
        block = min(y1 - y0, line_h * len(lines) + margin)
        for top in (y0, (y0 + y1 - block) // 2, y1 - block):
            box = (x0 - margin // 2, max(0, top - margin // 2), x1 + margin // 2,
                   min(h, top + block))
            layouts.append((box, lines))
    return layouts


#: Type sizes tried, as shares of the first (a twelfth of the shorter side), before a headline
#: may cover any of the subject.
TYPE_SCALES = (1.0, 0.8, 0.64)
#: Side, in cells, of the grid free places are searched on (:class:`_Grid`).
GRID = 96
#: Free places ranked by calm whose contrast is measured before one is taken or panelled.
CHECKED = 12


def _covered(mask: Image.Image, box: Box) -> int:
    """Subject pixels under ``box``."""
    return mask.crop(box).histogram()[255]


class _Grid:
    """The picture in square cells of ``cell`` pixels, for searching every place a text block
    could go: per cell, whether any subject pixel is in it, and the mean luminance and its
    square, each as a summed-area table, so a box's subject cells and luminance spread are
    four look-ups. A box is tested on the cells it touches, so a box the grid finds free is
    free of subject pixels."""

    def __init__(self, image: Image.Image, mask: Image.Image) -> None:
        self.width, self.height = w, h = image.size
        self.cell = max(1, -(-max(w, h) // GRID))
        self.cols, self.rows = -(-w // self.cell), -(-h // self.cell)
        size = (self.cols, self.rows)
        padded = Image.new("F", (self.cols * self.cell, self.rows * self.cell))
        padded.paste(mask.convert("F"), (0, 0))
        # Averaged as floats, a cell is above 0 when any one of its pixels is subject.
        subject = padded.reduce(self.cell) if self.cell > 1 else padded
        grey = image.convert("L").resize(size, Image.Resampling.BOX)
        self.subject = self._table([1 if v > 0 else 0
                                   for v in array("f", subject.tobytes())])
        lum = [relative_luminance((v, v, v)) for v in range(256)]
        values = [lum[v] for v in grey.tobytes()]
        self.lum = self._table(values)
        self.lum2 = self._table([v * v for v in values])

    def _table(self, values: list) -> list[list[float]]:
        table = [[0.0] * (self.cols + 1) for _ in range(self.rows + 1)]
        for y in range(self.rows):
            run, above, row = 0.0, table[y], table[y + 1]
            for x in range(self.cols):
                run += values[y * self.cols + x]
                row[x + 1] = above[x + 1] + run
        return table

    @staticmethod
    def _sum(table: list[list[float]], x0: int, y0: int, x1: int, y1: int) -> float:
        return table[y1][x1] - table[y0][x1] - table[y1][x0] + table[y0][x0]

    def places(self, width: int, height: int, inset: int) -> list[tuple[int, float, Box]]:
        """Every box of ``width`` x ``height`` pixels on the cell grid, at least ``inset``
        pixels inside the picture, as (subject cells under it, luminance spread, box)."""
        c = self.cell
        first = -(-inset // c)
        wide, tall = -(-width // c), -(-height // c)
        last_x = (self.width - inset - width) // c
        last_y = (self.height - inset - height) // c
        found = []
        for y in range(first, last_y + 1):
            for x in range(first, last_x + 1):
                box = (x, y, x + wide, y + tall)
                n = wide * tall
                mean = self._sum(self.lum, *box) / n
                spread = max(0.0, self._sum(self.lum2, *box) / n - mean * mean) ** 0.5
                found.append((round(self._sum(self.subject, *box)), spread,
                              (x * c, y * c, x * c + width, y * c + height)))
        return found


def _wrappings(text: str, cta: str | None, font: Font, width: int,
               draw: ImageDraw.ImageDraw) -> list[list[str]]:
    """The text wrapped at every width from ``width`` down to its longest word, once per
    distinct wrapping, the call to action as the last line."""
    seen: set[tuple[str, ...]] = set()
    out = []
    longest = max(draw.textlength(word, font=font) for word in text.split() or [""])
    trial = float(width)
    while trial >= longest:
        lines = _wrap(text, font, int(trial), draw) + ([cta] if cta else [])
        if tuple(lines) not in seen:
            seen.add(tuple(lines))
            out.append(lines)
        trial = min(trial - 1, trial * 0.85)
    return out


def set_headline(image: Image.Image, text: str, cta: str | None = None) -> Headline:
    """``image`` with ``text`` (and ``cta`` below it) set where it reads best, never over the
    subject (:func:`~.brand.subject_mask`) while any place is free of it: the calmest free
    place whose black or white text reaches 4.5:1, else the calmest free place on a panel.
    Full-width bands come first; halves of a portrait picture after its bands; then smaller
    type (:data:`TYPE_SCALES`); then any place clear of the subject at all (beside it, in a
    corner, between specks), wrapped as narrow as its longest word, largest type first. Only
    when no place at any size is clear does it go, on a panel, on the band or half that covers
    the least."""
    out = image.convert("RGB")
    w, h = out.size
    draw = ImageDraw.Draw(out)
    mask = subject_mask(out)
    subject = max(1, mask.histogram()[255])
    margin = max(4, min(w, h) // 24)

    def fonts(scale: float) -> tuple[Font, Font, int]:
        size = max(10, round(min(w, h) // 12 * scale))
        return _font(size), _font(max(8, size * 3 // 4)), int(size * 1.25)

    def widest(lines: list[str], scale: float) -> float:
        font, cta_font, _ = fonts(scale)
        return max(draw.textlength(line, font=cta_font if cta and i == len(lines) - 1
                                   else font) for i, line in enumerate(lines))

    # A place: (box, lines, type scale).
    layouts: list[tuple[Box, list[str], float]] = []
    free: list[tuple[Box, list[str], float]] = []
    for scale in TYPE_SCALES:
        font, _, line_h = fonts(scale)

        def lines_for(width: int, font: Font = font) -> list[str]:
            return _wrap(text, font, width, draw) + ([cta] if cta else [])

        # On a portrait picture a half wraps a headline into a narrow column: only when every
        # band covers the subject.
        for halves in (False, True):
            layouts = [(box, lines, scale) for box, lines in _layouts(
                w, h, margin, line_h, lines_for, lambda ls, s=scale: widest(ls, s), halves)]
            free = [layout for layout in layouts if not _covered(mask, layout[0])]
            if free:
                break
        if free:
            break
    ranked = False  # places found anywhere come ranked: calm, then near a corner
    if not free:  # anywhere clear of the subject, largest type first
        grid = _Grid(out, mask)
        for scale in TYPE_SCALES:
            font, _, line_h = fonts(scale)
            clear = []
            for lines in _wrappings(text, cta, font, w - 2 * margin, draw):
                block = (int(widest(lines, scale)) + 1 + margin, line_h * len(lines) + margin)
                clear += [(spread, box, lines) for n, spread, box
                          in grid.places(*block, margin // 2) if n == 0]
            if clear:
                # Calmest first; among places as calm, the one nearest a corner.
                clear.sort(key=lambda p: (round(p[0], 2), min(p[1][0], w - p[1][2])
                                          + min(p[1][1], h - p[1][3])))
                free, ranked = [(box, lines, scale) for _, box, lines in clear[:CHECKED]], True
                break
    if not free:  # nowhere clear of the subject at any size: the least covered band or half
        if not layouts:  # a word wider than the picture: it spills past any band
            font, _, line_h = fonts(TYPE_SCALES[-1])
            layouts = [(box, lines, TYPE_SCALES[-1]) for box, lines in _layouts(
                w, h, margin, line_h, lambda width: _wrap(text, font, width, draw)
                + ([cta] if cta else []), lambda lines: 0.0, False)]
        least = min(_covered(mask, layout[0]) for layout in layouts)
        free = [layout for layout in layouts if _covered(mask, layout[0]) == least]
    if not ranked:
        free.sort(key=lambda layout: _luminance_spread(out, layout[0]))
    colours: tuple[RGB, RGB] = ((255, 255, 255), (0, 0, 0))
    chosen: tuple[Box, list[str], float, RGB, float] | None = None
    for box, lines, scale in free:  # calmest first; the first that reads well wins
        colour = max(colours, key=lambda c: _worst_contrast(out, box, c))
        contrast = _worst_contrast(out, box, colour)
        if contrast >= MIN_CONTRAST:
            chosen = (box, lines, scale, colour, contrast)
            break
    overlap = _covered(mask, free[0][0])
    panel = chosen is None or overlap > 0
    if panel:
        box, lines, scale = chosen[:3] if chosen else free[0]
        colour = max(colours, key=lambda c: _worst_contrast(out, box, c))
        out, contrast = _panel(out, box, colour)
        chosen = (box, lines, scale, colour, contrast)
        draw = ImageDraw.Draw(out)
    box, lines, scale, colour, contrast = chosen  # type: ignore[misc]
    font, cta_font, line_h = fonts(scale)
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
