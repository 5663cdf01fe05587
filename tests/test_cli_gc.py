"""``genloop gc`` on an embedded runtime's home: a dry run reports, a real one deletes only what
nothing names and the grace has passed."""

from __future__ import annotations

import json
import os
import time

from genloop.workers.artifacts import LocalArtifactStore
from genloop.workers.cli.main import main
from genloop.workers.stores import SqliteStateStore
from genloop.workers.stores.records import ResultRecord


def test_gc_reports_on_a_dry_run_and_deletes_only_the_unnamed_old_images(tmp_path, capsys):
    store = SqliteStateStore(tmp_path / "state.db")
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    named, orphan = artifacts.put(b"named by a result"), artifacts.put(b"named by nothing")
    store.put_result(ResultRecord(key="k", op="generate", items=[{"artifact": named}],
                                  created_at=time.time()))
    store.close()
    aged = time.time() - 3 * 3600
    for key in (named, orphan):
        os.utime(artifacts.root / key[:2] / key, (aged, aged))

    assert main(["gc", "--home", str(tmp_path), "--grace", "1h", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert (dry["stored"], dry["in_use"], dry["deleted"], dry["dry_run"]) == (2, 1, 1, True)
    assert artifacts.exists(orphan)

    assert main(["gc", "--home", str(tmp_path), "--grace", "1h"]) == 0
    assert "deleted 1 " in capsys.readouterr().out
    assert artifacts.exists(named) and not artifacts.exists(orphan)


def test_gc_on_a_pool_takes_the_grace_its_workers_published(tmp_path, capsys):
    import uuid

    import redis
    from redis_util import redis_url

    from genloop.workers.stores.redis_keys import PoolKeys

    prefix = f"gc-{uuid.uuid4().hex[:8]}"
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    orphan = artifacts.put(b"named by nothing")
    aged = time.time() - 3 * 3600
    os.utime(artifacts.root / orphan[:2] / orphan, (aged, aged))
    redis.Redis.from_url(redis_url()).set(PoolKeys(prefix).retention_config, "3600.0")

    assert main(["gc", "--redis", redis_url(), "--prefix", prefix, "--artifacts",
                 f"file://{tmp_path / 'artifacts'}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == 1  # 3 h old, the pool keeps 1 h
    assert not artifacts.exists(orphan)
