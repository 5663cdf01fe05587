"""Graceful drain on a Redis pool of real worker processes: a worker told to stop (SIGTERM)
finishes the batch its engine is running, hands the rest back at once and exits within its
grace; a SIGKILL is left to lease expiry (test_worker_pool.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from redis_util import NO_DRAMATIQ_REQUEUE_MS, POOL_DB, redis_url

from genloop.sdk import Client, Graph, RunStatus

pytestmark = pytest.mark.slow

ITEMS = 12
GRACE = 10.0
#: Long enough that lease expiry (this plus a sweep tick) cannot pass for a hand-back.
LEASE_TTL = 15.0


def _bodies(client, tag: str, pid: int) -> int:
    return int(client.get(f"{tag}:bodies:{pid}") or 0)


def _until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _worker_pids(group: int) -> list[int]:
    """The processes of a ``genloop worker`` group (Dramatiq's main one and its workers)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getpgid(int(pid)) == group:
                pids.append(int(pid))
        except ProcessLookupError:
            pass
    return pids


def test_sigterm_hands_waiting_work_back_at_once_and_finishes_the_running_batch(
        pool, redis_client, tmp_path):
    url = redis_url(POOL_DB)
    args = ("--grace", str(GRACE), "--preload", "tiny")
    # The victim stops fetching, and so beating, at the signal while its batch still runs: the
    # fixture's 1.5 s heartbeat timeout would hand that batch to the survivor too
    victim = pool.start(threads=2, lease_ttl=LEASE_TTL, heartbeat_ms=NO_DRAMATIQ_REQUEUE_MS,
                        args=args)
    pool.wait_ready(redis_client)
    g = Graph()
    items = g.add("test-items", id="items", params={"log": str(tmp_path / "log"),
                                                    "value": ITEMS})
    g.add("test-engine-batches", id="draw", inputs=[items], map=True,
          params={"redis_url": url, "tag": "drain"})
    with Client.connect(url) as client:
        run = client.submit(g)
        victim_pids = _worker_pids(os.getpgid(victim.pid))
        # Every item waits in the victim's engine: one batch running (held at its first step
        # until the gate opens), the other step counts queued behind it.
        _until(lambda: sum(_bodies(redis_client, "drain", p) for p in victim_pids) == ITEMS
               and redis_client.exists("drain:in-engine"), 60, "the victim never took the items")
        survivor = pool.start(threads=2, lease_ttl=LEASE_TTL,
                              heartbeat_ms=NO_DRAMATIQ_REQUEUE_MS, args=args)
        pool.wait_ready(redis_client)
        survivor_pids = _worker_pids(os.getpgid(survivor.pid))

        signalled = time.time()
        victim.send_signal(signal.SIGTERM)  # as a platform scaling the pool down does
        _until(lambda: any(_bodies(redis_client, "drain", p) for p in survivor_pids), 10,
               "nothing was handed back to the survivor")
        redis_client.set("drain:gate", 1)  # the victim's running batch may finish now
        victim.wait(timeout=GRACE + 5)
        exited = time.time() - signalled
        result = run.wait(timeout=60)
        events = list(run.events(follow=False))

    assert result.status == RunStatus.SUCCEEDED, result.failures
    assert sorted(i["value"] for i in result.outputs["draw"].items) == list(range(ITEMS))
    completions = [int(redis_client.get(f"drain:completions:{i}") or 0) for i in range(ITEMS)]
    assert completions == [1] * ITEMS  # each completed once: the running batch on the victim
    starts: dict[str, list[float]] = {}
    for e in events:
        if e.type == "instance.started" and e.node_id == "draw":
            starts.setdefault(e.instance_id, []).append(e.time)
    handed_back = {i: t[-1] - signalled for i, t in starts.items() if len(t) > 1}
    assert handed_back, "no instance was taken again"
    assert len(handed_back) < ITEMS  # the running batch finished where it ran
    # At once, not at lease expiry (LEASE_TTL, 15 s): the last of them starts when one of the
    # survivor's two threads is free, seconds later on a loaded machine.
    assert max(handed_back.values()) <= LEASE_TTL / 3, handed_back
    assert not [e for e in events if e.type == "instance.retry"]  # no attempt spent
    assert exited <= GRACE, exited
    assert victim.returncode == 0
