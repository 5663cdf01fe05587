"""Storage through a gateway, on both gateway stores: a run the back end's retention deleted is
forgotten (owner, listing, summary, idempotency key) and a pinned one kept; a tenant's
retention bounds what a run asks; a tenant's stored-runs quota refuses with 429; a store from
before the runs list is listed on opening; results are kept to their tenant by default; a run
the back end lost no longer counts as open, and each unfinished one does; a run still going
when its look comes is looked at again later; runs sharing a creation time page without gaps;
the janitor never holds a process open."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest
from pydantic import BaseModel
from redis_util import redis_url

from genloop.gateway import Gateway, LimitExceeded, SqliteGatewayStore, TenantLimits
from genloop.gateway.redis_store import RedisGatewayStore
from genloop.gateway.service import scoped_key
from genloop.sdk import Graph, NotFound
from genloop.sdk.models import RunQuery
from genloop.workers import OpRegistry, op
from genloop.workers.backends.embedded import EmbeddedBackend
from genloop.workers.stores.retention import retention_pass


class N(BaseModel):
    n: int


def _backend(tmp_path, held: threading.Event | None = None, **options) -> EmbeddedBackend:
    """An embedded back end whose op ``one`` makes ``N(n=1)``; with ``held``, also an op
    ``held`` that makes it once the event is set."""
    registry = OpRegistry()
    op("one", output=N, registry=registry)(lambda p, inputs, ctx: N(n=1))
    if held is not None:
        op("held", output=N, registry=registry)(lambda p, inputs, ctx: held.wait(30) and N(n=1))
    return EmbeddedBackend(tmp_path / "home", threads=2, registry=registry, **options)


@pytest.fixture
def gate() -> threading.Event:
    """What ``held`` runs wait for: set it to end them (the gateway fixture does at teardown)."""
    return threading.Event()


@pytest.fixture(params=["sqlite", "redis"])
def gateway(request, tmp_path, gate):
    backend = _backend(tmp_path, held=gate)
    store = SqliteGatewayStore(tmp_path / "gateway.db") if request.param == "sqlite" else \
        RedisGatewayStore(redis_url(), prefix=f"gw-{uuid.uuid4().hex[:8]}")
    gateway = Gateway(backend, store)
    yield gateway
    gate.set()
    gateway.stop()  # its webhook deliveries, before the store they read closes
    store.close()
    backend.close()


def _held() -> Graph:
    g = Graph()
    g.add("held", id="held")
    return g


def _one(retention: float | None = None) -> Graph:
    g = Graph(retention=retention)
    g.add("one", id="one")
    return g


def _ended_run(gateway: Gateway, tenant: str, read: bool = False) -> str:
    info, _ = gateway.submit(tenant, _one(), "key-1")
    deadline = time.monotonic() + 30
    while not gateway.get(tenant, info.id).status.terminal:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    if read:
        gateway.result(tenant, info.id)  # indexed: its summary kept
    return info.id


def test_a_run_the_back_end_deleted_is_forgotten_and_a_pinned_one_kept(gateway):
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    # one run read and pinned, then one its tenant never read (never indexed)
    pinned = _ended_run(gateway, tenant + "-b", read=True)
    gone = _ended_run(gateway, tenant)
    gateway.pin(tenant + "-b", pinned, True)
    later = time.time() + 2 * gateway.retention
    assert gateway.forget_expired(now=later) == 0  # the back end still has both

    retention_pass(gateway.backend.store, gateway.retention, now=later)
    # in batches of one: the pinned run's look comes first, the deleted one's in a second batch
    assert gateway.forget_expired(now=later + gateway.retention, limit=1) == 1
    store = gateway.store
    assert store.owner(gone) is None and store.summary(gone) is None
    assert store.runs(tenant) == [] and store.run_for_key(scoped_key(tenant, "key-1")) is None
    with pytest.raises(NotFound):
        gateway.get(tenant, gone)
    assert store.owner(pinned) == tenant + "-b" and store.summary(pinned) is not None
    assert [r for r, _ in store.runs(tenant + "-b")] == [pinned]


def test_a_runs_first_look_is_due_a_retention_after_its_submission(gateway):
    before = time.time()
    info, _ = gateway.submit(f"t-{uuid.uuid4().hex[:6]}", _one(), None)
    after = time.time()
    # no look before the back end could have deleted it, one at the retention's end
    assert gateway.store.due_forgets(before + gateway.retention) == []
    assert gateway.store.due_forgets(after + gateway.retention) == [info.id]


def test_the_runs_due_now_are_forgotten_and_counted_each(gateway):
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    # Given two ended runs the back end's retention deleted, each due a look a second ago
    runs = [_ended_run(gateway, tenant), _ended_run(gateway, tenant + "-2")]
    retention_pass(gateway.backend.store, gateway.retention,
                   now=time.time() + 2 * gateway.retention)
    for run_id in runs:
        gateway.store.forget_at(run_id, time.time() - 1)
    # When the janitor's pass runs at the present time (no time given), both are forgotten
    assert gateway.forget_expired() == 2
    assert [gateway.store.owner(r) for r in runs] == [None, None]


def test_a_run_still_going_when_its_look_comes_is_kept_and_looked_at_a_retention_later(
        gateway):
    # Given a gateway whose run is held running
    info, _ = gateway.submit("t", _held(), None)
    # When its look comes while it still runs (no end time to count from)
    later = time.time() + 2 * gateway.retention
    assert gateway.forget_expired(now=later) == 0
    # Then it is kept, its next look a retention after this one
    store = gateway.store
    assert store.owner(info.id) == "t"
    assert store.due_forgets(later + gateway.retention - 1) == []
    assert store.due_forgets(later + gateway.retention) == [info.id]


def test_runs_sharing_one_creation_time_are_each_listed_once_across_pages(gateway):
    # Given five runs of a tenant recorded at one and the same time
    tenant, at = f"t-{uuid.uuid4().hex[:6]}", time.time()
    runs = {gateway.backend.submit(_one(), None).id for _ in range(5)}
    for run_id in runs:
        assert gateway.store.add_run(run_id, tenant, created_at=at)
    # When the tenant pages through them two at a time
    seen, cursor = [], None
    for _ in range(5):
        page = gateway.runs(tenant, RunQuery(limit=2, cursor=cursor))
        seen += [info.id for info in page.runs]
        if (cursor := page.next) is None:
            break
    # Then each is listed once: the cursor orders by (time, id), not by time alone
    assert sorted(seen) == sorted(runs)


def test_a_runs_retention_is_kept_within_the_tenants(gateway):
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    gateway.store.set_limits(tenant, TenantLimits(retention=3600))
    store = gateway.backend.store

    asked_less, _ = gateway.submit(tenant, _one(retention=60), None)
    asked_more, _ = gateway.submit(tenant, _one(retention=30 * 86400), None)
    asked_none, _ = gateway.submit(tenant, _one(), None)

    assert [store.get_run(r.id).keep_for for r in (asked_less, asked_more, asked_none)] == \
        [60, 3600, 3600]


def test_a_tenant_past_its_stored_runs_quota_gets_429_until_one_is_forgotten(gateway):
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    gateway.store.set_limits(tenant, TenantLimits(max_stored_runs=1))
    first = _ended_run(gateway, tenant)

    with pytest.raises(LimitExceeded) as refused:
        gateway.submit(tenant, _one(), None)
    assert (refused.value.code, refused.value.limit) == ("storage_quota", 1)

    later = time.time() + 2 * gateway.retention
    retention_pass(gateway.backend.store, gateway.retention, now=later)
    assert gateway.forget_expired(now=later) == 1 and gateway.store.owner(first) is None
    assert gateway.submit(tenant, _one(), None)[1]


def test_a_served_gateway_forgets_on_its_own_what_the_retention_deleted(tmp_path, monkeypatch):
    from server import LiveServer

    from genloop.gateway import create_app, service
    from genloop.sdk import Client
    from genloop.workers.middleware import sweeper

    for module, name in ((service, "FORGET_EVERY"), (sweeper, "RETENTION_EVERY")):
        monkeypatch.setattr(module, name, 0.1)
    backend = _backend(tmp_path, sweep_every=0.1, retention=0.5)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    app = create_app(backend, store)
    try:
        with LiveServer(app, lifespan=True) as server:
            client = Client.http(server.url, api_key=store.create_key("t"))
            run = client.submit(_one())
            run.wait(timeout=30)
            assert app.state.gateway._janitor.daemon  # started with the app, as a daemon thread
            deadline = time.monotonic() + 20
            # the gateway forgets the run with nobody asking (the tenant's list skips a run
            # the back end lost either way)
            while store.owner(run.id) is not None or list(client.runs()):
                assert time.monotonic() < deadline, "the gateway still holds the run"
                time.sleep(0.05)
            with pytest.raises(NotFound):
                run.status()
            client.close()
        assert app.state.gateway._janitor is None  # stopped with the server
    finally:
        store.close()
        backend.close()


_NEVER_STOPPED = """
import sys
from genloop.gateway import Gateway, SqliteGatewayStore
from genloop.workers.backends.embedded import EmbeddedBackend

backend = EmbeddedBackend(sys.argv[1] + "/home", threads=1)
Gateway(backend, SqliteGatewayStore(sys.argv[1] + "/gateway.db")).start_janitor()
backend.close()
"""


def test_a_janitor_started_from_the_main_thread_and_never_stopped_lets_the_process_exit(
        tmp_path):
    # Given a program whose main thread starts a gateway's janitor (as `genloop serve` does,
    # uvicorn on the main thread) and ends without stopping it: a thread started from a
    # daemon thread (the test server's) is a daemon whatever it asks, so only this shows it
    # When the program ends
    done = subprocess.run([sys.executable, "-c", _NEVER_STOPPED, str(tmp_path)], timeout=60,
                          capture_output=True, text=True)
    # Then it exits at once, not FORGET_EVERY (60 s) a pass for ever
    assert done.returncode == 0, done.stderr


def test_a_gateway_opening_a_store_from_before_the_runs_list_lists_them_at_their_creation(
        tmp_path):
    # Given a run a gateway recorded in a Redis store before the runs list had an index
    backend = _backend(tmp_path)
    prefix = f"gw-{uuid.uuid4().hex[:8]}"
    store = RedisGatewayStore(redis_url(), prefix=prefix)
    again = RedisGatewayStore(redis_url(), prefix=prefix)
    try:
        first = Gateway(backend, store)
        run_id = _ended_run(first, "acme")
        first.stop()
        store.r.delete(store.k.tenant_set("runs", "acme"), store.k.listed)
        assert store.runs("acme") == []

        # When a gateway opens it again
        Gateway(backend, again).stop()

        # Then the run is listed at the time the back end created it
        assert again.runs("acme") == [(run_id, backend.get(run_id).created_at)]
    finally:
        again.close()
        store.close()
        backend.close()


def test_a_gateway_keeps_each_tenants_results_to_itself_unless_the_operator_shares_them(
        gateway):
    info, _ = gateway.submit("acme", _one(), None)
    assert gateway.backend.store.run_spec(info.id).graph["namespace"] == "tenant:acme"


def test_each_unfinished_run_of_a_tenant_counts_against_its_concurrency(gateway):
    # Given a tenant allowed two unfinished runs, with two held running
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    gateway.store.set_limits(tenant, TenantLimits(max_concurrent_runs=2))
    for _ in range(2):
        assert gateway.submit(tenant, _held(), None)[1]
    # When it submits a third, Then it is refused, as the third
    with pytest.raises(LimitExceeded) as refused:
        gateway.submit(tenant, _one(), None)
    assert (refused.value.code, refused.value.requested) == ("concurrency_limit", 3)


def test_a_run_the_back_end_no_longer_has_counts_no_more_against_its_tenants_concurrency(
        gateway):
    # Given a tenant allowed one unfinished run, whose only open run the back end lost
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    gateway.store.set_limits(tenant, TenantLimits(max_concurrent_runs=1))
    gateway.store.add_run("f" * 32, tenant)
    # When it submits, Then the lost run is taken for ended and the new run starts
    assert gateway.submit(tenant, _one(), None)[1]
    assert "f" * 32 not in gateway.store.open_runs(tenant)
