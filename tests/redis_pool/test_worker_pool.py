"""The Redis worker pool with real processes: crashes, duplicates, races, many runs."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import redis
from metrics_util import free_ports, scrape, value
from redis_util import NO_DRAMATIQ_REQUEUE_MS, POOL_DB
from redis_util import redis_url as _url

from genloop.sdk import Client, Graph, RunStatus

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)  # recovery times: pytest -o log_cli=true --log-cli-level=INFO


def redis_url() -> str:
    return _url(POOL_DB)


def _render_graph(tag: str, n: int, seconds: float = 0.2) -> Graph:
    g = Graph()
    g.add("test-render", id="render", params={
        "redis_url": redis_url(), "tag": tag, "n": n, "shard_size": 2, "seconds": seconds})
    return g


def test_sigkill_a_worker_mid_generation_loses_nothing(pool, redis_client):
    """Chaos: two real worker processes, one SIGKILLed mid-body. Every lost shard runs again
    within 30 s of the kill (its lease ends, the sweeper re-sends it), and every op body is
    completed once."""
    victim = pool.start(threads=2, lease_ttl=3.0, heartbeat_ms=NO_DRAMATIQ_REQUEUE_MS)
    metrics_port = free_ports(1)
    survivor = pool.start(threads=2, lease_ttl=3.0, args=("--metrics-port", str(metrics_port)),
                          heartbeat_ms=NO_DRAMATIQ_REQUEUE_MS)
    pool.wait_ready(redis_client)
    with Client.connect(redis_url()) as client:
        run = client.submit(_render_graph("kill", n=32, seconds=0.15))
        deadline = time.monotonic() + 60
        victim_group = os.getpgid(victim.pid)
        # Wait until a body is running in the victim's process group, then kill the group.
        busy_in_victim = False
        while not busy_in_victim and time.monotonic() < deadline:
            busy = redis_client.get("kill:busy")
            try:
                busy_in_victim = busy is not None and os.getpgid(int(busy)) == victim_group
            except ProcessLookupError:
                pass
            time.sleep(0.005)
        pool.kill(victim)
        killed_at = time.monotonic()
        assert busy_in_victim, "the victim never ran a body"
        bodies_at_kill = int(redis_client.get("kill:bodies"))

        result = run.wait(timeout=30)
        log.info("finished_after_kill_s=%.1f", time.monotonic() - killed_at)

    assert result.status == RunStatus.SUCCEEDED and not result.failures, result.failures
    assert sorted(i["value"] for i in result.outputs["render"].items) == list(range(32))
    writes = [int(redis_client.get(f"kill:writes:{seed}") or 0) for seed in range(32)]
    assert writes == [1] * 32, writes
    assert int(redis_client.get("kill:bodies")) > bodies_at_kill  # the lost shard ran again
    assert survivor.poll() is None
    # the survivor's sweeper took the dead worker's lease over, and says so in its metrics
    metrics = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
    assert value(metrics, "genloop_lease_takeovers_total") >= 1
    assert value(metrics, "genloop_sweeper_resends_total", reason="lease_ended") >= 1


def _wait_until_no_message_is_left(client: redis.Redis, timeout: float = 30) -> None:
    """Until no message waits in a queue (delayed ones included) or is held by a worker."""
    deadline = time.monotonic() + timeout
    while True:
        queues = [k for k in client.scan_iter("dramatiq:*") if client.type(k) == b"list"]
        acks = list(client.scan_iter("dramatiq:__acks__.*"))
        if not any(client.llen(q) for q in queues) and not any(client.scard(a) for a in acks):
            return
        assert time.monotonic() < deadline, "messages still in flight"
        time.sleep(0.05)


def test_the_same_message_twice_to_two_workers_runs_once(pool, redis_client):
    pool.start(threads=1), pool.start(threads=1)
    pool.wait_ready(redis_client)
    with Client.connect(redis_url()) as client:
        run = client.submit(_render_graph("dup", n=1, seconds=1.0))
        inst = client.backend.store.instance(run.id, "render#0")
        client.backend.scheduler.enqueue([inst])  # a second delivery, picked up by the other worker
        result = run.wait(timeout=60)
        _wait_until_no_message_is_left(redis_client)  # the duplicate backed off and ended

    assert result.status == RunStatus.SUCCEEDED
    assert int(redis_client.get("dup:bodies")) == 1


def test_parents_finishing_together_on_two_workers_release_the_child_once(pool, redis_client):
    """Distinct result keys, and a barrier that fails unless both bodies run at once: the two
    completions really race for the child's counter."""
    pool.start(threads=1), pool.start(threads=1)
    pool.wait_ready(redis_client)
    g = Graph()
    params = {"redis_url": redis_url(), "tag": "race", "parties": 2}
    a = g.add("test-barrier", id="a", params={**params, "name": "a"})
    b = g.add("test-barrier", id="b", params={**params, "name": "b"}, queue="cpu")
    g.add("test-barrier", id="child", inputs=[a, b], params={**params, "tag": "race-child",
                                                             "parties": 1})
    with Client.connect(redis_url()) as client:
        run = client.submit(g)
        result = run.wait(timeout=60)
        events = list(run.events(follow=False))

    assert result.status == RunStatus.SUCCEEDED, result.failures
    assert int(redis_client.get("race:bodies:a")) == int(redis_client.get("race:bodies:b")) == 1
    # each node queued once: the roots at submit, the child when both parents had finished
    assert [e.node_id for e in events if e.type == "node.queued"] == ["a", "b", "child"]
    assert int(redis_client.get("race-child:bodies:child")) == 1
    assert result.outputs["child"].items == [{"value": 3}]


def test_client_killed_mid_run_the_run_goes_on(pool, redis_client, tmp_path):
    import subprocess
    import sys

    pool.start(threads=2)
    pool.wait_ready(redis_client)
    script = (
        "import sys; from genloop.sdk import Client, Graph; "
        f"c = Client.connect({redis_url()!r}); g = Graph(); "
        "g.add('test-render', id='render', params={'redis_url': " + repr(redis_url()) +
        ", 'tag': 'orphan', 'n': 6, 'shard_size': 2, 'seconds': 0.2}); "
        "print(c.submit(g).id, flush=True); import time; time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()

    with Client.connect(redis_url()) as client:
        result = client.get(run_id).wait(timeout=60)

    assert result.status == RunStatus.SUCCEEDED
    assert len(result.outputs["render"].items) == 6


def test_fifty_runs_from_ten_threads_all_finish(pool, redis_client):
    pool.start(threads=4)
    pool.wait_ready(redis_client)
    results: dict[int, object] = {}
    with Client.connect(redis_url()) as client:
        def submit_five(t: int) -> None:
            for k in range(5):
                i = t * 5 + k
                g = Graph()
                a = g.add("test-barrier", id="a",
                          params={"redis_url": redis_url(), "tag": f"many{i}", "parties": 1})
                g.add("test-barrier", id="b", inputs=[a],
                      params={"redis_url": redis_url(), "tag": f"many{i}b", "parties": 1})
                results[i] = client.submit(g)

        threads = [threading.Thread(target=submit_five, args=(t,)) for t in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        finished = {i: run.wait(timeout=120) for i, run in results.items()}

    assert len(finished) == 50
    assert all(r.status == RunStatus.SUCCEEDED for r in finished.values())
    assert all(r.outputs["b"].items == [{"value": 2}] for r in finished.values())


def test_a_message_deleted_from_the_broker_runs_again(pool, redis_client):
    """The message is gone (a broker hiccup, an operator's mistake): genloop's own record of
    the queued instance brings it back, within 90 s."""
    with Client.connect(redis_url(), artifacts=pool.artifacts) as client:
        run = client.submit(_render_graph("lost", n=2, seconds=0.1))
        # No worker yet: the message waits its turn in the fair queue; a worker that joins
        # and dies at once lets it into the broker
        assert redis_client.llen("dramatiq:gpu") == 0
        fair = client.backend.scheduler.enqueue  # the pool's fair queue, which sends
        fair.join("gone", "gpu", threads=1, ttl=1.0)
        fair.pump("gpu")
        assert redis_client.llen("dramatiq:gpu") == 1
        redis_client.delete("dramatiq:gpu", "dramatiq:gpu.msgs")  # before any worker saw it
        pool.start(threads=1, heartbeat_ms=NO_DRAMATIQ_REQUEUE_MS)
        pool.wait_ready(redis_client)
        ready_at = time.monotonic()

        result = run.wait(timeout=90)
        log.info("finished_after_workers_ready_s=%.1f", time.monotonic() - ready_at)

    assert result.status == RunStatus.SUCCEEDED
    assert int(redis_client.get("lost:bodies")) == 1
