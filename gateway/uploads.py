"""What the gateway accepts as an uploaded image: PNG or JPEG, checked as an image.

A tenant uploads an image to edit it (a generate node's ``init_image`` / ``mask``). Pillow reads
the header first: a declared ``image/png`` that is not one is refused, and so is an image larger
than :data:`MAX_UPLOAD_PIXELS` (a small file can declare a huge canvas that would exhaust memory
when decoded). Then the image is decoded and encoded again, and the new file is what is stored
(content-addressed, so the key names it): whatever trailed the image (an HTML page, a zip) and
its metadata (EXIF with GPS, text chunks) are gone, and what the gateway serves back is a plain
image. A JPEG's EXIF orientation is applied to the pixels first, so it still looks the same way up.
"""

from __future__ import annotations

import io

from pydantic import BaseModel

from .errors import ApiProblem

#: Media types accepted, and the artifact extension each is stored with.
UPLOAD_TYPES = {"image/png": "png", "image/jpeg": "jpg"}
#: Largest image (width x height) an upload may declare: 4096 x 4096, the largest generate size.
MAX_UPLOAD_PIXELS = 4096 * 4096
_FORMATS = {"png": "PNG", "jpg": "JPEG"}


class Uploaded(BaseModel):
    """A stored upload: use ``key`` as ``init_image`` or ``mask``, or read it back."""

    key: str
    content_type: str
    bytes: int
    width: int
    height: int


def upload_ext(content_type: str | None) -> str:
    """The extension for a declared media type; 415 for anything but PNG and JPEG."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media not in UPLOAD_TYPES:
        raise ApiProblem(415, "unsupported_media_type",
                         f"upload a PNG or JPEG image with its Content-Type "
                         f"({', '.join(UPLOAD_TYPES)}), not {media or 'no content type'!r}")
    return UPLOAD_TYPES[media]


#: Modes each format is saved in as they are; any other is converted to RGB (or RGBA for PNG).
_KEPT_MODES = {"png": {"1", "L", "LA", "P", "RGB", "RGBA", "I;16"}, "jpg": {"L", "RGB"}}


def reencoded(data: bytes, ext: str) -> tuple[bytes, int, int]:
    """``(image, width, height)``: ``data`` decoded and encoded again in its own format, with no
    metadata or trailing bytes, if it is a well-formed image of the declared kind; 422
    otherwise."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    def refuse(why: str) -> ApiProblem:
        return ApiProblem(422, "invalid_image", f"the body is not a usable {ext.upper()} "
                          f"image: {why}",
                          details={"problems": [{"loc": ["body"], "message": why}]})

    if not data:
        raise refuse("it is empty")
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format != _FORMATS[ext]:
                raise refuse(f"it is {image.format or 'another format'}")
            width, height = image.size
            if width * height > MAX_UPLOAD_PIXELS:
                raise refuse(f"{width}x{height} pixels; at most {MAX_UPLOAD_PIXELS} in all")
            image.load()  # decodes every chunk: a truncated or corrupt file fails here
            clean = ImageOps.exif_transpose(image) if ext == "jpg" else image.copy()
    except ApiProblem:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError,
            Image.DecompressionBombError) as exc:
        raise refuse(str(exc) or type(exc).__name__) from exc
    if clean.mode not in _KEPT_MODES[ext]:
        has_alpha = "A" in clean.getbands() or "transparency" in clean.info
        clean = clean.convert("RGBA" if ext == "png" and has_alpha else "RGB")
    clean.info = {k: v for k, v in clean.info.items() if k == "transparency"}
    out = io.BytesIO()
    if ext == "png":
        clean.save(out, "PNG")
    else:
        clean.save(out, "JPEG", quality=95)
    return out.getvalue(), clean.width, clean.height
