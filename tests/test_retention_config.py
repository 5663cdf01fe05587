"""Where a process takes its retention from: a duration on the command line or in
GENLOOP_RETENTION, and on a Redis pool what the workers published (so a gateway's schedule
agrees with theirs)."""

from __future__ import annotations

import uuid

import pytest
import redis
from redis_util import redis_url

from genloop.workers.backends.redis_backend import RedisBackend
from genloop.workers.stores.redis_keys import PoolKeys
from genloop.workers.stores.retention import configured_retention, duration


@pytest.mark.parametrize(("text", "seconds"), [("7d", 604_800), ("12h", 43_200), ("30m", 1_800),
                                               ("45s", 45), ("90", 90), (" 1.5H ", 5_400),
                                               ("1", 1), ("0.5s", 0.5)])
def test_durations_read_as_seconds(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "7w", "-1h", "0", "soon"])
def test_a_bad_duration_is_refused_with_what_to_write(text):
    with pytest.raises(ValueError, match="7d|longer than 0"):
        duration(text)


def test_the_environment_sets_the_retention_else_a_week(monkeypatch):
    monkeypatch.delenv("GENLOOP_RETENTION", raising=False)
    assert configured_retention() == 7 * 86_400
    monkeypatch.setenv("GENLOOP_RETENTION", "2h")
    assert configured_retention() == 7_200


def test_a_client_of_a_pool_takes_the_retention_its_workers_published(tmp_path, monkeypatch):
    monkeypatch.setenv("GENLOOP_RETENTION", "2h")
    prefix, artifacts = f"ret-{uuid.uuid4().hex[:8]}", f"file://{tmp_path}"
    unpublished = RedisBackend(redis_url(), artifacts, prefix=prefix)
    redis.Redis.from_url(redis_url()).set(PoolKeys(prefix).retention_config, "600.0")
    published = RedisBackend(redis_url(), artifacts, prefix=prefix)

    assert (unpublished.store.retention, published.store.retention) == (7_200, 600)
    unpublished.close()
    published.close()
