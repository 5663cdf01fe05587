"""Decoding artifact bytes: good images load as RGB, anything else is a Permanent error."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from genloop.evaluators import load_image
from genloop.sdk.errors import Permanent


def encode(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def test_png_with_alpha_loads_as_rgb():
    image = load_image(encode(Image.new("RGBA", (5, 4), (255, 0, 0, 128))))
    assert image.mode == "RGB" and image.size == (5, 4)


def test_jpeg_loads():
    assert load_image(encode(Image.new("RGB", (8, 8), "blue"), "JPEG")).size == (8, 8)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (None, "missing"),
        (b"", "empty"),
        (b"definitely not an image", "not a readable image"),
        (encode(Image.new("RGB", (64, 64), "red"))[:60], "not a readable image"),  # truncated
        ("a string", "must be bytes"),
    ],
)
def test_unreadable_artifacts_are_permanent(data, match):
    with pytest.raises(Permanent, match=match):
        load_image(data, name="artifact abc123")


def test_error_names_the_artifact():
    with pytest.raises(Permanent, match="artifact abc123"):
        load_image(b"junk", name="artifact abc123")
