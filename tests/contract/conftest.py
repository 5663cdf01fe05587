"""The state store contract runs against every implementation (add new stores to STORES), and
the artifact store contract against the local directory and S3."""

from __future__ import annotations

import uuid

import pytest
from redis_util import redis_url
from s3_util import S3_ENV, moto_server

from genloop.workers.artifacts import LocalArtifactStore, open_artifact_store
from genloop.workers.stores import SqliteStateStore
from genloop.workers.stores.redis import RedisStateStore


def _sqlite(tmp_path):
    return SqliteStateStore(tmp_path / "state.db")


def _redis(tmp_path):
    # A fresh key prefix per test keeps tests apart on the shared test database.
    return RedisStateStore(redis_url(), prefix=f"test-{uuid.uuid4().hex[:8]}")


STORES = {"sqlite": _sqlite, "redis": _redis}


@pytest.fixture(params=sorted(STORES))
def store(request, tmp_path):
    s = STORES[request.param](tmp_path)
    yield s
    if isinstance(s, RedisStateStore):
        # The test database is shared and long-lived on a developer's machine (mutation runs
        # repeat these tests thousands of times): left behind, its keys made every SCAN of it
        # (tests/test_routing.py's cleanup) take seconds.
        if names := list(s.client.scan_iter(match=f"{s.keys.p}*", count=1000)):
            s.client.unlink(*names)
    s.close()


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
    """Every artifact store: a local directory, and S3 (a moto server)."""
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts")
    request.getfixturevalue("s3_endpoint")
    import boto3

    bucket = f"genloop-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return open_artifact_store(f"s3://{bucket}/runs")
