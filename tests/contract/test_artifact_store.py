"""The artifact store contract, against the local directory and S3 (a moto server)."""

from __future__ import annotations

import threading
import uuid

import pytest
from s3_util import S3_ENV, moto_server

from genloop.sdk import GenloopError, NotFound
from genloop.workers.artifacts import LocalArtifactStore, artifact_key, open_artifact_store


@pytest.fixture(scope="module")
def s3_endpoint():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in S3_ENV.items():
            mp.setenv(k, v)
        with moto_server() as endpoint:
            mp.setenv("AWS_ENDPOINT_URL", endpoint)
            yield endpoint


@pytest.fixture(params=["local", "s3"])
def artifacts(request, tmp_path):
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts")
    request.getfixturevalue("s3_endpoint")
    import boto3

    bucket = f"genloop-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return open_artifact_store(f"s3://{bucket}/runs")


def test_put_returns_the_content_key_and_get_the_bytes(artifacts):
    data = b"\x89PNG fake image"
    key = artifacts.put(data, "png")

    assert key == artifact_key(data, "png") and key.endswith(".png")
    assert artifacts.exists(key)
    assert artifacts.get(key) == data


def test_putting_the_same_bytes_twice_is_harmless(artifacts):
    assert artifacts.put(b"same") == artifacts.put(b"same")


def test_missing_artifact_is_not_found(artifacts):
    key = artifact_key(b"never stored", "png")
    assert not artifacts.exists(key)
    with pytest.raises(NotFound):
        artifacts.get(key)


def test_malformed_keys_are_refused(artifacts):
    key = artifact_key(b"bytes", "png")
    artifacts.put(b"bytes")
    # A well-formed key with anything before or after it is no key: it would name another path
    for bad in ("../../etc/passwd", f"../{key}", f"{key}/../../etc/passwd", f"{key}\n",
                f"{key}.png", f"{key[:-4]}.toolongext", key.upper()):
        with pytest.raises(GenloopError, match="malformed artifact key"):
            artifacts.get(bad)
        with pytest.raises(GenloopError, match="malformed artifact key"):
            artifacts.exists(bad)
    assert artifacts.get(key) == b"bytes"


def test_concurrent_writers_of_one_image_leave_it_whole(artifacts):
    data = bytes(range(256)) * 512
    keys = []
    threads = [threading.Thread(target=lambda: keys.append(artifacts.put(data)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and artifacts.get(keys[0]) == data


def test_one_key_pattern_and_media_type_table_serve_stores_and_gateway():
    from genloop.workers.artifacts.base import ARTIFACT_KEY, CONTENT_TYPES, content_type
    from genloop.workers.gateway import app, service

    key = artifact_key(b"bytes", "png")
    assert ARTIFACT_KEY.match(key) and not ARTIFACT_KEY.match("../" + key)
    assert [content_type(f"{key[:-4]}.{ext}") for ext in ("png", "jpeg", "webp", "bin")] == [
        "image/png", "image/jpeg", "image/webp", "application/octet-stream"]
    assert app.CONTENT_TYPES is CONTENT_TYPES and service.ARTIFACT_KEY is ARTIFACT_KEY


def test_an_unknown_artifact_store_scheme_is_a_genloop_error_naming_the_choices():
    from genloop.sdk import GenloopError

    with pytest.raises(GenloopError, match="use file:///dir or s3://bucket/prefix"):
        open_artifact_store("ftp://host/dir")
