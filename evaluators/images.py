"""Decoding candidate images from artifact bytes, with failures the runtime will not retry.

Artifacts reach the evaluators as bytes from the artifact store. A truncated or foreign file
fails the same way on every retry, so every decoding error becomes
:class:`~genloop.sdk.errors.Permanent` here, at the seam, instead of a PIL exception deep inside
a model's preprocessing.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, UnidentifiedImageError

from genloop.sdk.errors import Permanent


def load_image(
    data: bytes | bytearray | memoryview | None, *, name: str = "artifact"
) -> Image.Image:
    """Decode ``data`` into a fully loaded RGB image.

    The pixels are decoded now (PIL is lazy by default), so a truncated file fails here and not
    later in a batch. Images with alpha or a palette are converted to RGB, the mode every CLIP
    preprocessing expects. ``name`` (an artifact id) only appears in error messages.
    """
    if data is None:
        raise Permanent(f"{name} is missing: no bytes to decode")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise Permanent(f"{name} must be bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise Permanent(f"{name} is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            # PIL only warns about decompression bombs below its hard limit; fail instead.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(bytes(data))) as opened:
                opened.load()
                image = opened.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        raise Permanent(f"{name} is not a readable image: {exc}") from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise Permanent(f"{name} is too large to decode safely: {exc}") from exc
    return image
