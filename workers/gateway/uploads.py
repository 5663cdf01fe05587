"""What the gateway accepts as an uploaded image: PNG or JPEG, checked as an image.

A tenant uploads an image to edit it (a generate node's ``init_image`` / ``mask``). The bytes
are stored as they came (content-addressed, so the key names them), but only after Pillow has
read the header and checked the file's structure: a declared ``image/png`` that is not one is
refused, and so is an image larger than :data:`MAX_UPLOAD_PIXELS` (a small file can declare a
huge canvas that would exhaust a worker's memory when decoded).
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


def image_size(data: bytes, ext: str) -> tuple[int, int]:
    """``(width, height)`` of ``data`` if it is a well-formed image of the declared kind;
    422 otherwise."""
    from PIL import Image, UnidentifiedImageError

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
            image.verify()  # the file's structure (chunks, checksums), without decoding
    except ApiProblem:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError,
            Image.DecompressionBombError) as exc:
        raise refuse(str(exc) or type(exc).__name__) from exc
    return width, height
