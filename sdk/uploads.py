"""Images a client uploads to edit (``Client.upload``): the bytes and the kind they are.

The kind is read from the bytes' signature, not from a file name: the gateway checks the image
again, and refuses one that is not what it says (see ``gateway/uploads.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ClientError

#: Artifact extension -> media type of the images an upload may be.
UPLOAD_MEDIA = {"png": "image/png", "jpg": "image/jpeg"}


def image_upload(image: bytes | str | os.PathLike[str]) -> tuple[bytes, str]:
    """``(data, ext)`` of a PNG or JPEG given as bytes or as a file path."""
    data = bytes(image) if isinstance(image, bytes | bytearray) else Path(image).read_bytes()
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return data, "png"
    if data.startswith(b"\xff\xd8\xff"):
        return data, "jpg"
    raise ClientError("upload a PNG or JPEG image (its bytes or a file path); these bytes are "
                      "neither")
