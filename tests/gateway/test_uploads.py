"""Uploads: a tenant's own images to edit, PNG or JPEG, checked, capped, and its alone."""

from __future__ import annotations

import io

import httpx
from PIL import Image

from genloop.sdk import Graph
from genloop.sdk.wire import ApiError


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (32, 32), color: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt)
    return out.getvalue()


def upload(url: str, key: str, data: bytes, media: str = "image/png") -> httpx.Response:
    return httpx.post(f"{url}/v1/artifacts", content=data, timeout=30,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": media})


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, ApiError.model_validate_json(response.content).code


def test_an_uploaded_image_is_the_tenants_to_read_and_edit_and_no_one_elses(stack):
    _, alice = stack.tenant()
    _, bob = stack.tenant()
    # Given alice uploads a PNG
    data = image_bytes(color="#%06x" % (hash(stack.url) & 0xFFFFFF))
    response = upload(stack.url, alice, data)
    assert response.status_code == 201, response.text
    body = response.json()
    key = body["key"]
    assert body["width"] == 32 and body["bytes"] == len(data) and key.endswith(".png")
    assert response.headers["location"] == f"/v1/artifacts/{key}"
    # Then she reads it back, and edits it in a graph
    read = httpx.get(f"{stack.url}/v1/artifacts/{key}",
                     headers={"Authorization": f"Bearer {alice}"})
    assert read.status_code == 200 and read.content == data
    g = Graph()
    g.generate("a blue square", n=1, model="tiny", init_image=key, strength=0.5, id="edit")
    result = stack.client(alice).submit(g).wait(timeout=180)
    assert result.status == "succeeded" and result.items("edit")[0].init_image == key
    # And bob can neither read it (404) nor edit it (422, as for a key that does not exist)
    read = httpx.get(f"{stack.url}/v1/artifacts/{key}", headers={"Authorization": f"Bearer {bob}"})
    assert code(read) == (404, "not_found")
    answers = []
    for ref in (key, "0" * 64 + ".png"):
        g = Graph()
        g.generate("a blue square", n=1, model="tiny", mask=ref, init_image=ref, id="edit")
        response = httpx.post(f"{stack.url}/v1/runs", content=g.model_dump_json(), timeout=30,
                              headers={"Authorization": f"Bearer {bob}",
                                       "Content-Type": "application/json"})
        assert code(response) == (422, "invalid_graph")
        problems = response.json()["details"]["problems"]
        assert [p["path"] for p in problems] == ["nodes[0].params.init_image",
                                                "nodes[0].params.mask"]
        answers.append([p["message"].replace(ref, "KEY") for p in problems])
    assert answers[0] == answers[1]  # nothing tells bob that alice's key exists


def test_uploads_are_checked_images_of_the_declared_type_and_size(stack):
    _, key = stack.tenant()
    assert upload(stack.url, key, image_bytes("JPEG"), "image/jpeg").json()["key"].endswith(
        ".jpg")
    assert code(upload(stack.url, key, image_bytes(), "image/gif")) == (
        415, "unsupported_media_type")
    assert code(upload(stack.url, key, image_bytes(), "application/json")) == (
        415, "unsupported_media_type")
    # A JPEG declared as PNG, a truncated PNG, bytes that are no image, an empty body
    for data, media in [(image_bytes("JPEG"), "image/png"), (image_bytes()[:60], "image/png"),
                        (b"<svg/>", "image/png"), (b"", "image/jpeg")]:
        assert code(upload(stack.url, key, data, media)) == (422, "invalid_image"), data[:8]
    # A small file declaring a huge canvas
    assert code(upload(stack.url, key, image_bytes(size=(8192, 4096)))) == (
        422, "invalid_image")
    # And a body over the upload cap is 413 before it is read
    too_big = b"\x89PNG" + b"\0" * 8_000_001
    assert code(upload(stack.url, key, too_big)) == (413, "body_too_large")


def test_the_sdk_uploads_files_and_bytes_sync_and_async(stack, tmp_path):
    import asyncio

    import pytest

    from genloop.sdk.errors import ClientError, NotFound

    _, key = stack.tenant()
    _, other = stack.tenant()
    path = tmp_path / "photo.jpg"
    path.write_bytes(image_bytes("JPEG", color="green"))
    client = stack.client(key)
    # A file path, sync: the key names a JPEG that reads back as the same bytes
    jpeg = client.upload(path)
    assert jpeg.endswith(".jpg") and client.read_artifact(jpeg) == path.read_bytes()

    async def upload_png() -> str:
        async with stack.aclient(key) as aclient:
            return await aclient.upload(image_bytes(color="purple"))

    png = asyncio.run(upload_png())
    assert png.endswith(".png") and client.read_artifact(png) == image_bytes(color="purple")
    with pytest.raises(NotFound):
        stack.client(other).read_artifact(png)
    with pytest.raises(ClientError, match="PNG or JPEG"):
        client.upload(b"GIF89a...")
