"""The state store contract runs against every implementation; add new stores to STORES."""

from __future__ import annotations

import uuid

import pytest
from redis_util import redis_url

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
    s.close()
