"""The gateway store contract, against SQLite and a real Redis."""

from __future__ import annotations

import time

import pytest
import redis
from gateway_settings import STORE_DB, redis_url
from wait_util import until

from genloop.gateway import SqliteGatewayStore, TenantLimits
from genloop.gateway.redis_store import RedisGatewayStore
from genloop.gateway.store import RunSummary, hash_key


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = SqliteGatewayStore(tmp_path / "gateway.db")
    else:
        redis.Redis.from_url(redis_url(STORE_DB)).flushdb()
        s = RedisGatewayStore(redis_url(STORE_DB))
    yield s
    s.close()


def test_keys_map_to_tenants_and_are_stored_hashed(store):
    key = store.create_key("acme")
    assert key.startswith("gl_") and len(key) > 40
    assert store.tenant_of(key) == "acme"
    assert store.tenant_of(key + "x") is None
    (info,) = store.keys()
    assert info.tenant == "acme" and info.id == hash_key(key)[:12] and info.revoked_at is None
    assert key not in repr(store.keys())


def test_revoke_by_key_or_id(store):
    first, second = store.create_key("acme"), store.create_key("acme")
    assert store.revoke(first).tenant == "acme"
    assert store.tenant_of(first) is None and store.tenant_of(second) == "acme"
    second_id = hash_key(second)[:12]
    assert store.revoke(second_id).id == second_id
    assert store.tenant_of(second) is None
    assert store.revoke("gl_unknown") is None and store.revoke("nothing") is None


def test_a_session_names_its_tenant_until_it_ends_or_its_key_is_revoked(store):
    key, other = store.create_key("acme"), store.create_key("acme")
    first, second, third = (store.create_session(k) for k in (key, key, other))
    assert len({first, second, third}) == 3 and key not in first
    assert store.session_tenant(first) == store.session_tenant(third) == "acme"
    store.end_session(first)
    assert store.session_tenant(first) is None and store.session_tenant(second) == "acme"
    store.revoke(key)
    assert store.session_tenant(second) is None and store.session_tenant(third) == "acme"
    assert store.create_session(key) is None and store.session_tenant("made-up") is None


def test_uploads_count_once_per_key_and_are_the_tenants_artifacts(store):
    assert store.upload_usage("acme") == (0, 0)
    store.add_upload("acme", "a.png", 100)
    store.add_upload("acme", "a.png", 100)
    store.add_upload("acme", "b.jpg", 50)
    assert store.upload_usage("acme") == (2, 150) and store.upload_usage("bob") == (0, 0)
    assert store.has_artifact("acme", "b.jpg") and not store.has_artifact("bob", "b.jpg")


def test_hits_count_within_a_window_per_tenant_and_start_again_after_it(store):
    counts = [store.hit("acme", "upload", 0.5)[0] for _ in range(3)]
    if counts != [1, 2, 3]:  # a window ended in between: count again in the next one
        counts = [store.hit("acme", "upload", 0.5)[0] for _ in range(3)]
    assert counts == [1, 2, 3]
    n, left = store.hit("bob", "upload", 0.5)
    assert n == 1 and 0 < left <= 0.5
    # Once the store counts bob from 1 again (its window ended: windows are aligned on the
    # clock), acme's window has ended too, and its count starts again
    until(lambda: store.hit("bob", "upload", 0.5)[0] == 1, "the next 0.5 s window")
    assert store.hit("acme", "upload", 0.5)[0] == 1


def test_tenant_names_are_checked(store):
    with pytest.raises(ValueError):
        store.create_key("a b")


def test_limits_per_tenant(store):
    assert store.limits("acme") is None
    limits = TenantLimits(max_concurrent_runs=2, max_candidates_per_run=9, max_cost_per_run=5.5,
                          models=["tiny"], evaluators=[])
    store.set_limits("acme", limits)
    assert store.limits("acme") == limits


def test_runs_have_one_owner_and_leave_the_open_and_unindexed_sets(store):
    assert store.add_run("r1", "acme", "k1") is True
    assert store.add_run("r1", "acme", "k1") is False
    assert store.add_run("r2", "acme") is True
    store.add_run("r3", "other")
    assert store.owner("r1") == "acme" and store.owner("r3") == "other"
    assert store.owner("r9") is None
    assert store.run_for_key("k1") == "r1" and store.run_for_key("k2") is None
    assert store.open_runs("acme") == ["r1", "r2"]
    store.mark_ended("r1")
    assert store.open_runs("acme") == ["r2"]
    assert store.unindexed_runs("acme") == ["r1", "r2"]
    summary = RunSummary(status="succeeded", finished_at=12.5, images=4, best_score=0.25)
    assert store.summary("r2") is None
    store.mark_indexed("r2", summary)
    assert store.unindexed_runs("acme") == ["r1"]
    assert store.summary("r2") == summary and store.summary("r1") is None


def test_a_run_keeps_the_cost_it_was_admitted_with(store):
    store.add_run("c1", "acme", None, 12.5)
    store.add_run("c1", "acme", None, 99.0)  # a replay changes nothing
    store.add_run("c2", "acme")
    assert (store.run_cost("c1"), store.run_cost("c2"), store.run_cost("c9")) == (12.5, 0.0, 0.0)


def test_artifacts_are_visible_per_tenant(store):
    store.add_run("r1", "acme")
    store.add_artifacts("acme", ["a.png", "b.png"], "r1")
    store.add_artifacts("acme", [], "r1")
    assert store.has_artifact("acme", "a.png")
    assert not store.has_artifact("other", "a.png")
    store.ping()


def test_a_runs_artifacts_stay_visible_while_a_recorded_run_made_them(store):
    for run_id in ("r1", "r2"):
        store.add_run(run_id, "acme")
    store.add_artifacts("acme", ["shared.png", "first.png"], "r1")
    store.add_artifacts("acme", ["shared.png", "first.png"], "r1")  # read again: counted once
    store.add_artifacts("acme", ["shared.png"], "r2")

    store.forget_run("r1")
    assert store.has_artifact("acme", "shared.png") and not store.has_artifact("acme", "first.png")
    store.forget_run("r2")
    assert not store.has_artifact("acme", "shared.png")


def test_a_tenants_runs_are_listed_newest_first_a_page_at_a_time(store):
    for i in range(5):
        store.add_run(f"a{i}", "acme")
        time.sleep(0.002)  # distinct creation times
    store.add_run("b0", "other")

    first = store.runs("acme", limit=3)
    rest = store.runs("acme", before=first[-1][1], limit=3)

    assert [r for r, _ in first] == ["a4", "a3", "a2"]
    assert [r for r, _ in rest] == ["a1", "a0"]
    assert [r for r, _ in store.runs("other")] == ["b0"] and store.runs("nobody") == []


def test_runs_recorded_before_the_listing_index_are_listed_once(tmp_path):
    # Given a Redis gateway store written before the runs index existed: owners only
    redis.Redis.from_url(redis_url(STORE_DB)).flushdb()
    old = RedisGatewayStore(redis_url(STORE_DB))
    for run_id in ("old1", "old2", "gone"):
        old.add_run(run_id, "acme")
    old.r.delete(old.k.tenant_set("runs", "acme"))
    old.add_run("new", "acme")
    assert [r for r, _ in old.runs("acme")] == ["new"]

    # When a gateway opens it, knowing when each run was created (not "gone": lost)
    created = {"old1": 1.0, "old2": 2.0}
    store = RedisGatewayStore(redis_url(STORE_DB))
    listed = store.list_earlier_runs(created.get)

    # Then the earlier runs are listed at their creation times, once
    assert listed == 2
    assert [r for r, _ in store.runs("acme")] == ["new", "old2", "old1"]
    assert store.runs("acme", before=3.0) == [("old2", 2.0), ("old1", 1.0)]
    assert store.list_earlier_runs(created.get) == 0
    # And a SQLite store always had the index (created_at is a column): nothing to do
    assert SqliteGatewayStore(tmp_path / "gateway.db").list_earlier_runs(created.get) == 0


def test_the_redis_stores_keys_stay_where_an_earlier_release_wrote_them():
    # An upgrade must find the keys a running gateway wrote: the prefix and names are a format
    redis.Redis.from_url(redis_url(STORE_DB)).flushdb()
    store = RedisGatewayStore(redis_url(STORE_DB))
    try:
        key = store.create_key("acme")
        raw = redis.Redis.from_url(redis_url(STORE_DB), decode_responses=True)
        assert raw.get(f"genloop:gw:keyid:{hash_key(key)[:12]}") == hash_key(key)
        assert raw.exists(f"genloop:gw:key:{hash_key(key)}")
    finally:
        store.close()
