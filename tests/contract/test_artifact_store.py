"""The artifact store contract, against the local directory and S3 (a moto server): the
``artifacts`` fixture of the contract conftest."""

from __future__ import annotations

import datetime
import os
import re
import resource
import signal
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager

import pytest

from genloop.sdk import GenloopError, NotFound, StoreError
from genloop.workers.artifacts import LocalArtifactStore, artifact_key, open_artifact_store
from genloop.workers.artifacts.base import StoredArtifact


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
    with pytest.raises(NotFound, match=key):
        artifacts.get(key)
    assert artifacts.delete_if_older(key, cutoff=time.time() + 60) is False


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
    from genloop.gateway import app, service
    from genloop.workers.artifacts.base import ARTIFACT_KEY, CONTENT_TYPES, content_type

    key = artifact_key(b"bytes", "png")
    assert ARTIFACT_KEY.match(key) and not ARTIFACT_KEY.match("../" + key)
    assert [content_type(f"{key[:-4]}.{ext}") for ext in ("png", "jpeg", "webp", "bin")] == [
        "image/png", "image/jpeg", "image/webp", "application/octet-stream"]
    assert app.CONTENT_TYPES is CONTENT_TYPES and service.ARTIFACT_KEY is ARTIFACT_KEY


def test_an_unknown_artifact_store_scheme_is_a_genloop_error_naming_the_choices():
    from genloop.sdk import GenloopError

    with pytest.raises(GenloopError, match="use file:///dir or s3://bucket/prefix"):
        open_artifact_store("ftp://host/dir")


# S3-compatible servers name a missing object differently (AWS: 404 on HEAD, NoSuchKey on a
# copy; others NotFound); moto gives one name per call, so the rest is checked on botocore's
# Stubber, which answers at the client's transport seam and checks each request's parameters.
_S3_KEY = artifact_key(b"stubbed", "png")
_MISSING = ("404", "NoSuchKey", "NotFound")


@contextmanager
def _stubbed_s3(prefix: str | None = "/runs/"):
    import boto3
    from botocore.stub import Stubber

    from genloop.workers.artifacts.s3 import S3ArtifactStore

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    with Stubber(client) as stub:
        store = S3ArtifactStore("b", client=client) if prefix is None else (
            S3ArtifactStore("b", prefix, client=client))
        yield store, stub
        stub.assert_no_pending_responses()


def _head(name: str = f"runs/{_S3_KEY}") -> dict:
    return {"Bucket": "b", "Key": name}


@pytest.mark.parametrize("code", _MISSING)
def test_every_s3_name_for_a_missing_object_reads_as_missing(code):
    with _stubbed_s3() as (s3, stub):
        stub.add_client_error("head_object", code, http_status_code=404, expected_params=_head())
        assert s3.exists(_S3_KEY) is False
        stub.add_client_error("head_object", code, http_status_code=404, expected_params=_head())
        assert s3.delete_if_older(_S3_KEY, cutoff=time.time()) is False
        # put: the copy that marks it written finds nothing, so the bytes are written
        name = f"runs/{_S3_KEY}"
        stub.add_client_error("copy_object", code, http_status_code=404, expected_params={
            "Bucket": "b", "Key": name, "CopySource": {"Bucket": "b", "Key": name},
            "MetadataDirective": "REPLACE", "ContentType": "image/png"})
        stub.add_response("put_object", {}, expected_params={
            "Bucket": "b", "Key": name, "Body": b"stubbed", "ContentType": "image/png"})
        assert s3.put(b"stubbed") == _S3_KEY


def test_other_s3_errors_are_store_errors_naming_the_call_and_the_artifact():
    def naming(what: str) -> str:
        return f"^s3 {what} {re.escape(repr(_S3_KEY))}: .*AccessDenied"

    with _stubbed_s3() as (s3, stub):
        for what, method, call in [
                ("head", "head_object", lambda: s3.exists(_S3_KEY)),
                ("get", "get_object", lambda: s3.get(_S3_KEY)),
                ("copy", "copy_object", lambda: s3.put(b"stubbed")),
                ("head", "head_object", lambda: s3.delete_if_older(_S3_KEY, time.time()))]:
            stub.add_client_error(method, "AccessDenied", http_status_code=403)
            with pytest.raises(StoreError, match=naming(what)):
                call()
        stub.add_client_error("copy_object", "NoSuchKey", http_status_code=404)
        stub.add_client_error("put_object", "AccessDenied", http_status_code=403)
        with pytest.raises(StoreError, match=naming("put")):
            s3.put(b"stubbed")
        # an old object whose deletion is refused
        stub.add_response("head_object", {"LastModified": datetime.datetime(
            2026, 1, 1, tzinfo=datetime.UTC)}, expected_params=_head())
        stub.add_client_error("delete_object", "AccessDenied", http_status_code=403)
        with pytest.raises(StoreError, match=naming("delete")):
            s3.delete_if_older(_S3_KEY, time.time())
        stub.add_client_error("list_objects_v2", "AccessDenied", http_status_code=403)
        with pytest.raises(StoreError, match="s3 list"):
            list(s3.stored())


def test_a_missing_s3_object_is_not_found_naming_it_and_a_newer_one_is_kept():
    with _stubbed_s3() as (s3, stub):
        stub.add_client_error("get_object", "NoSuchKey", http_status_code=404)
        with pytest.raises(NotFound, match=_S3_KEY):
            s3.get(_S3_KEY)
        # Written exactly at the cutoff is not older than it: kept
        written = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        stub.add_response("head_object", {"LastModified": written}, expected_params=_head())
        assert s3.delete_if_older(_S3_KEY, cutoff=written.timestamp()) is False


def test_an_s3_store_lists_only_artifacts_under_its_prefix_and_none_in_an_empty_bucket():
    with _stubbed_s3(prefix=None) as (s3, stub):
        stub.add_response("list_objects_v2", {"KeyCount": 0},
                          expected_params={"Bucket": "b", "Prefix": ""})
        assert list(s3.stored()) == []
        written = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        stub.add_response("head_object", {"LastModified": written},
                          expected_params=_head(_S3_KEY))
        stub.add_response("delete_object", {}, expected_params=_head(_S3_KEY))
        assert s3.delete_if_older(_S3_KEY, cutoff=written.timestamp() + 1) is True
    with _stubbed_s3(prefix="/Xruns/") as (s3, stub):
        stub.add_response("list_objects_v2", {"Contents": [
            {"Key": f"Xruns/{_S3_KEY}", "Size": 7, "LastModified": written}]},
            expected_params={"Bucket": "b", "Prefix": "Xruns/"})
        assert list(s3.stored()) == [StoredArtifact(_S3_KEY, 7, written.timestamp())]


def test_putting_bytes_s3_holds_renews_them_without_writing_them_again():
    with _stubbed_s3() as (s3, stub):
        name = f"runs/{_S3_KEY}"
        stub.add_response("copy_object", {}, expected_params={
            "Bucket": "b", "Key": name, "CopySource": {"Bucket": "b", "Key": name},
            "MetadataDirective": "REPLACE", "ContentType": "image/png"})
        assert s3.put(b"stubbed") == _S3_KEY  # a put_object here is a request the stub refuses


def test_an_unreachable_s3_is_a_store_error_naming_the_artifact():
    import boto3
    from botocore.config import Config

    from genloop.workers.artifacts.s3 import S3ArtifactStore

    client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    s3 = S3ArtifactStore("b", client=client)
    for call in (lambda: s3.exists(_S3_KEY), lambda: s3.get(_S3_KEY), lambda: s3.put(b"stubbed"),
                 lambda: s3.delete_if_older(_S3_KEY, time.time())):
        with pytest.raises(StoreError, match=_S3_KEY):
            call()


def test_a_local_artifact_written_at_the_cutoff_is_kept_and_stray_files_are_not_listed(tmp_path):
    store = LocalArtifactStore(tmp_path / "artifacts")
    keys = {store.put(bytes([i]), "png") for i in range(40)}  # about 35 shard folders
    for name in ("stray", "zz-stray", "00-stray"):  # files beside the shards, listed before some
        (tmp_path / "artifacts" / name).write_bytes(b"")
    # a key whose file went between listing and reading (a dangling link) is passed over
    gone = artifact_key(b"gone", "png")
    (tmp_path / "artifacts" / gone[:2]).mkdir(exist_ok=True)
    os.symlink(tmp_path / "nowhere", tmp_path / "artifacts" / gone[:2] / gone)
    for i in range(40, 300):  # neighbours in the dangling link's shard, listed after it
        key = artifact_key(bytes([i % 256, i // 256]), "png")
        if key[:2] == gone[:2]:
            keys.add(store.put(bytes([i % 256, i // 256]), "png"))
    assert {a.key for a in store.stored()} == keys

    key = sorted(keys)[0]
    written = store.root / key[:2] / key
    os.utime(written, (1_700_000_000.0, 1_700_000_000.0))
    assert store.delete_if_older(key, cutoff=1_700_000_000.0) is False
    assert store.delete_if_older(key, cutoff=1_700_000_000.5) is True and not written.exists()


def test_a_plain_path_names_its_folder_whole_even_with_url_characters(tmp_path):
    folder = tmp_path / "images#1?v"
    store = open_artifact_store(str(folder))
    store.put(b"x")
    assert isinstance(store, LocalArtifactStore) and store.root == folder and folder.is_dir()


def test_a_local_put_of_held_bytes_renews_the_file_in_place(tmp_path):
    store = open_artifact_store(f"file://{tmp_path}/artifacts")
    assert isinstance(store, LocalArtifactStore) and store.root == tmp_path / "artifacts"
    key = store.put(b"held")
    path = store.root / key[:2] / key
    os.utime(path, (1_700_000_000.0, 1_700_000_000.0))
    inode = path.stat().st_ino

    assert store.put(b"held") == key
    assert path.stat().st_ino == inode and path.stat().st_mtime > 1_700_000_000.0


def test_local_file_system_errors_are_store_errors_naming_the_artifact(tmp_path):
    store = LocalArtifactStore(tmp_path / "artifacts")
    key = artifact_key(b"blocked", "png")
    (store.root / key[:2]).write_bytes(b"")  # a file where the key's folder belongs
    for doing, call in (("reading", lambda: store.get(key)),
                        ("touching", lambda: store.put(b"blocked")),  # held already?
                        ("deleting", lambda: store.delete_if_older(key, time.time()))):
        with pytest.raises(StoreError, match=f"^{doing} artifact '{key}': "):
            call()
    (store.root / key[:2]).unlink()
    (store.root / key[:2] / key).mkdir(parents=True)  # a folder where the file belongs
    with pytest.raises(StoreError, match=f"reading artifact '{key}'"):
        store.get(key)



def test_a_local_write_that_fails_is_a_store_error_naming_the_artifact(tmp_path):
    store = LocalArtifactStore(tmp_path / "artifacts")
    # The file-size limit at 0 makes the write itself fail (EFBIG), as a full disk would
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, limit[1]))
    try:
        with pytest.raises(StoreError, match=f"^writing artifact '{artifact_key(b'big', 'png')}'"
                                             ": .*File too large"):
            store.put(b"big")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, ignored)
    # and nothing half-written is left behind, where no collector would find it
    assert [p for p in store.root.rglob("*") if not p.is_dir()] == []


def test_a_local_write_is_made_beside_its_file_not_in_the_systems_temporary_folder(
        tmp_path, monkeypatch):
    # (the system's may be another file system, where the final rename fails): here it is
    # a folder that does not exist
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    store = LocalArtifactStore(tmp_path / "artifacts")
    assert store.get(store.put(b"beside")) == b"beside"


def test_a_local_store_makes_its_folder_with_the_missing_parents(tmp_path):
    store = LocalArtifactStore(tmp_path / "not" / "yet" / "there")
    assert store.get(store.put(b"placed")) == b"placed"


def test_an_s3_store_opened_by_uri_keeps_its_images_under_the_prefix(s3_endpoint):
    import boto3

    bucket = f"genloop-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket)
    key = open_artifact_store(f"s3://{bucket}/runs").put(b"placed")
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == [
        f"runs/{key}"]
