"""Uploads: a tenant's own images to edit, PNG or JPEG, checked, capped, and its alone."""

from __future__ import annotations

import io
import time

import httpx
import pytest
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
    assert code(read) == (404, "not_found") and read.json()["message"] == f"no artifact {key!r}"
    answers = []
    for ref in (key, "0" * 64 + ".png"):
        g = Graph()
        g.add("gw-wait", params={"sleep": 0.0}, id="first", inputs=[])  # no edit: checked past
        g.generate("a blue square", n=1, model="tiny", mask=ref, init_image=ref, id="edit")
        response = httpx.post(f"{stack.url}/v1/runs", content=g.model_dump_json(), timeout=30,
                              headers={"Authorization": f"Bearer {bob}",
                                       "Content-Type": "application/json"})
        assert code(response) == (422, "invalid_graph")
        problems = response.json()["details"]["problems"]
        assert [(p["node_id"], p["path"], p["received"]) for p in problems] == [
            ("edit", "nodes[1].params.init_image", ref), ("edit", "nodes[1].params.mask", ref)]
        answers.append([p["message"].replace(ref, "KEY") for p in problems])
    assert answers[0] == answers[1]  # nothing tells bob that alice's key exists
    # and each says what to do instead
    assert answers[0] == [f"params.{field}: no image 'KEY' of yours; use one your runs made or "
                          "upload it (POST /v1/artifacts)" for field in ("init_image", "mask")]


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
    # A file path, sync: the key names a JPEG that reads back as the same image (re-encoded)
    jpeg = client.upload(path)
    back = Image.open(io.BytesIO(client.read_artifact(jpeg)))
    assert jpeg.endswith(".jpg") and back.format == "JPEG" and back.size == (32, 32)
    assert max(abs(a - b) for a, b in zip(back.getpixel((16, 16)), (0, 128, 0), strict=True)) < 8

    async def upload_png() -> str:
        async with stack.aclient(key) as aclient:
            return await aclient.upload(image_bytes(color="purple"))

    png = asyncio.run(upload_png())
    assert png.endswith(".png") and client.read_artifact(png) == image_bytes(color="purple")
    with pytest.raises(NotFound):
        stack.client(other).read_artifact(png)
    with pytest.raises(ClientError, match="PNG or JPEG"):
        client.upload(b"GIF89a...")


def test_an_upload_is_stored_re_encoded_without_trailing_bytes_or_metadata(stack):
    _, key = stack.tenant()
    # A PNG with an HTML page after its end, and a JPEG with GPS in its EXIF
    polyglot = image_bytes(color="navy") + b"<html><script>alert(document.cookie)</script>"
    exif = Image.Exif()
    exif[0x8825] = {1: "N", 2: (51.0, 30.0, 0.0)}  # GPSInfo
    tagged = io.BytesIO()
    Image.new("RGB", (16, 16), "olive").save(tagged, "JPEG", exif=exif, comment=b"secret")
    for data, media in [(polyglot, "image/png"), (tagged.getvalue(), "image/jpeg")]:
        response = upload(stack.url, key, data, media)
        assert response.status_code == 201, response.text
        read = httpx.get(f"{stack.url}/v1/artifacts/{response.json()['key']}",
                         headers={"Authorization": f"Bearer {key}"})
        assert read.status_code == 200 and read.headers["x-content-type-options"] == "nosniff"
        assert b"<html" not in read.content and b"secret" not in read.content
        assert response.json()["bytes"] == len(read.content)
        image = Image.open(io.BytesIO(read.content))
        assert not image.getexif() and "comment" not in image.info
        # What is stored is still the image that was sent
        sent = Image.open(io.BytesIO(data)).convert("RGB")
        assert image.size == sent.size and image.convert("RGB").getpixel((3, 3)) == pytest.approx(
            sent.getpixel((3, 3)), abs=8)


def test_uploads_have_per_tenant_quotas_and_a_rate_answered_429_with_retry_after(stack):
    from genloop.gateway import TenantLimits

    _, few = stack.tenant(TenantLimits(max_uploads=2))
    _, small = stack.tenant(TenantLimits(max_upload_bytes=200))
    _, slow = stack.tenant(TenantLimits(uploads_per_minute=3))
    _, other = stack.tenant()
    for colour in ("red", "green"):
        assert upload(stack.url, few, image_bytes(color=colour)).status_code == 201
    assert upload(stack.url, few, image_bytes(color="red")).status_code == 201  # the same image
    over = upload(stack.url, few, image_bytes(color="blue"))
    assert code(over) == (429, "upload_quota") and int(over.headers["retry-after"]) >= 1
    assert over.json()["details"] == {"limit": 2, "requested": 3}
    noise = io.BytesIO()
    Image.effect_noise((64, 64), 80).save(noise, "PNG")  # about 4 KB: over 200 bytes
    assert code(upload(stack.url, small, noise.getvalue())) == (429, "upload_quota")
    # The rate counts fixed clock minutes (GatewayStore.hit): its five uploads go in one, well
    # inside it (four that straddled a minute's end were all let in)
    if (left := 60 - time.time() % 60) < 15:
        time.sleep(left + 0.1)
    made = [upload(stack.url, slow, image_bytes(color=c)).status_code
            for c in ("red", "green", "blue", "white")]
    assert made == [201, 201, 201, 429]
    before = time.time()
    rate = upload(stack.url, slow, image_bytes(color="black"))
    after = time.time()
    # the answer counts the uploads made and says when the minute ends
    assert code(rate) == (429, "upload_rate")
    assert 60 - after % 60 - 1 <= int(rate.headers["retry-after"]) <= 60 - before % 60 + 1
    assert rate.json()["details"] == {"limit": 3, "requested": 5}
    assert rate.json()["message"].startswith("4 uploads this minute; your limit is 3")
    # Another tenant is not held back by theirs
    assert upload(stack.url, other, image_bytes(color="blue")).status_code == 201
