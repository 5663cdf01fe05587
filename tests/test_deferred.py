"""Ops that wait on a batched resource free their worker thread (genloop.workers.runtime.deferred).

What the engine's and the score batcher's logs must show: worker threads no longer bound the
batch size, a loop round reaches the engine as one group, score requests of two runs share one
evaluator call, and a cancelled instance inside a shared batch ends alone. Retries of deferred
work follow the node's policy as Dramatiq's would.
"""

from __future__ import annotations

import logging
import threading

import pytest
from genloop_test_ops import executions

from genloop.sdk import Graph, Loop, NodeStatus, RunStatus


@pytest.fixture(scope="module")
def models():
    """An engine whose window and group wait are long, so that batches are formed by the cap
    and by groups only: the batch log is then exact, whatever the machine's speed."""
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.registry import ModelRegistry

    reg = ModelRegistry("cpu", engine_options=EngineOptions(window=30.0, group_wait=30.0,
                                                            max_batch=8))
    yield reg
    reg.engine.close()


@pytest.fixture
def resources(models):
    from genloop.evaluators import ScoreBatcher
    from genloop.workers.models.resources import Resources

    res = Resources(device="cpu", models=models)
    res.scoring = ScoreBatcher(window=30.0, max_images=8)
    models.engine.batcher.batches.clear()
    models.engine.batcher.groups.clear()
    yield res
    res.scoring.close()


def _client(tmp_path, resources, threads):
    from genloop.sdk import Client

    return Client.local(home=tmp_path / "home", threads=threads, resources=resources,
                        lease_ttl=5.0)


# -- deferred work and its retries (no model) -------------------------------------------------
def test_deferred_work_that_fails_is_retried_with_the_nodes_policy(client, tmp_path, caplog):
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-deferred", id="flaky", params={"log": log, "fail_times": 2}, max_retries=3)

    run = client.submit(g)
    with caplog.at_level(logging.INFO):
        result = run.wait(timeout=30)

    assert result.status == RunStatus.SUCCEEDED
    assert result.outputs["flaky"].items == [{"value": 0}]
    retries = [e for e in run.events(follow=False) if e.type == "instance.retry"]
    assert [e.attempt for e in retries] == [1, 2]
    assert executions(log) == 3
    # each retried attempt is one WARNING line, as for work Dramatiq retries itself
    retried = [r for r in caplog.records if "failed, retrying" in r.getMessage()]
    assert [r.levelno for r in retried] == [logging.WARNING] * 2
    assert all("Transient: planned failure" in r.getMessage() for r in retried)


def test_deferred_work_fails_for_good_when_retries_run_out_or_the_error_is_permanent(
        client, tmp_path):
    log = str(tmp_path / "log")
    g = Graph()
    g.add("test-deferred", id="spent", params={"log": log, "value": 1, "fail_times": 9},
          max_retries=1)
    g.add("test-deferred", id="bad", params={"log": log, "value": 2, "fail_times": 9,
                                             "permanent": True}, max_retries=5)

    result = client.submit(g).wait(timeout=30)

    assert result.status == RunStatus.FAILED
    attempts = {f.node_id: (f.error_type, f.attempts) for f in result.failures}
    assert attempts == {"spent": ("Transient", 2), "bad": ("Permanent", 1)}
    assert executions(log, "spent:1") == 2 and executions(log, "bad:2") == 1


# -- generation and scoring through the batched resources -------------------------------------
def test_one_worker_thread_feeds_full_batches_from_many_instances(tmp_path, resources, models):
    # Given one worker thread and two runs of eight one-candidate instances each
    with _client(tmp_path, resources, threads=1) as client:
        graphs = []
        for prompt in ("a red circle", "a blue square"):
            g = Graph()
            g.generate(prompt, n=8, seed=3, shard_size=1, model="tiny", id="gen")
            graphs.append(g)

        runs = [client.submit(g) for g in graphs]
        results = [r.wait(timeout=300) for r in runs]

        # Then the engine ran two full batches, not sixteen batches of one
        assert [r.status for r in results] == [RunStatus.SUCCEEDED] * 2
        assert models.engine.batcher.batches == [8, 8]
        # and every candidate kept its own instance and result key
        store = client.backend.runtime.store
        for run in runs:
            keys = {i.result_key for i in store.instances(run.id)}
            assert len(keys) == 8
        assert [c.seed for c in results[0].items("gen")] == list(range(3, 11))


def test_a_loop_round_reaches_the_engine_as_one_group(tmp_path, resources, models):
    # Given a two-round loop of eight candidates: round 2 maps one instance per image
    with _client(tmp_path, resources, threads=4) as client:
        run = client.submit(Loop(prompt="a green triangle", candidates=8, rounds=2,
                                 model="tiny", evaluator="clip"))
        result = run.wait(timeout=300)

        assert result.status == RunStatus.SUCCEEDED
        # Then round 2's eight instances ran as one batch of eight
        assert {(run.id, "round-2/generate"): 8} in models.engine.batcher.groups
        assert {(run.id, "round-1/generate"): 8} in models.engine.batcher.groups
        round2 = [i for i in client.backend.runtime.store.instances(run.id)
                  if i.node_id == "round-2/generate"]
        assert len(round2) == 8 and len({i.result_key for i in round2}) == 8
        # and both rounds were scored from memory, not from re-read PNGs
        assert resources.images.hits >= 16


def test_score_requests_of_two_runs_share_one_evaluator_batch(tmp_path, resources):
    # Given two runs, each scoring four images against its own prompt
    with _client(tmp_path, resources, threads=2) as client:
        graphs = []
        for prompt in ("a red circle", "a blue square"):
            g = Graph()
            g.score(g.generate(prompt, n=4, seed=1, model="tiny"), text=prompt, evaluator="clip",
                    id="score")
            graphs.append(g)

        results = [r.wait(timeout=300) for r in [client.submit(g) for g in graphs]]

        # Then one evaluator call scored all eight images, for both prompts
        assert [r.status for r in results] == [RunStatus.SUCCEEDED] * 2
        judge = resources.evaluator("clip")
        assert resources.scoring.batches == [(judge.identity, 8, 2)]
        assert all(len(r.items("score")) == 4 for r in results)


def test_a_cancelled_instance_inside_a_shared_batch_ends_alone(tmp_path, resources, models):
    from genloop.workers.engine import ImageSettings

    # Given an engine busy with a request held at its first step
    gate = threading.Event()
    held = models.engine.submit(
        "tiny", ["held"], [0], ImageSettings(steps=2, guidance=5.0, width=32, height=32),
        on_step=lambda done, total: gate.wait(60), group=("held", "h"), group_size=1)
    with _client(tmp_path, resources, threads=2) as client:
        first, second = Graph(), Graph()
        first.generate("a red circle", n=4, seed=1, model="tiny", id="gen")
        second.generate("a blue square", n=4, seed=1, model="tiny", id="gen")
        # And a run whose instance waits in the engine's queue behind it
        doomed = client.submit(first)
        store = client.backend.runtime.store
        _wait_until(lambda: store.instances(doomed.id)[0].status == NodeStatus.RUNNING)

        # When it is cancelled, and another run's instance joins the queue
        doomed.cancel()
        kept = client.submit(second)
        _wait_until(lambda: store.instances(kept.id)[0].status == NodeStatus.RUNNING)
        gate.set()

        # Then the other run's images are made, in a batch without the cancelled request
        assert kept.wait(timeout=300).status == RunStatus.SUCCEEDED
        assert doomed.wait(timeout=60).status == RunStatus.CANCELLED
        held.future.result(60)
        assert models.engine.batcher.batches == [1, 4]
        assert models.engine.batcher.groups[1:] == [{(kept.id, "gen"): 4}]


def _wait_until(condition, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


# -- a worker process killed while its work is inside the engine -----------------------------
@pytest.mark.slow
def test_a_worker_killed_while_its_work_is_in_the_engine_is_recovered_and_completes_once(
        tmp_path):
    """A real ``genloop worker`` is SIGKILLed while the engine holds its instance (the op has
    returned its Deferred and the message is acked): once the lease runs out, another worker's
    sweeper re-sends the instance, it runs there, and the run records one completion."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import redis
    from redis_util import POOL_DB, redis_url

    from genloop.sdk import Client

    url = redis_url(POOL_DB)
    r = redis.Redis.from_url(url)
    r.flushdb()
    artifacts = f"file://{tmp_path / 'artifacts'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "GENLOOP_SWEEP_EVERY": "1"}

    def worker() -> subprocess.Popen:
        # Dramatiq's own requeue of a dead worker's messages is pushed out of reach (10 min
        # heartbeat), so what recovers the work is genloop's lease and sweeper.
        return subprocess.Popen(
            [sys.executable, "-m", "genloop.workers.cli.main", "worker", "--redis", url,
             "--artifacts", artifacts, "--threads", "2", "--import", "genloop_test_ops",
             "--lease-ttl", "3", "--heartbeat-timeout-ms", "600000"],
            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    victim = worker()
    survivor = None
    try:
        g = Graph()
        g.add("test-engine-held", id="held", params={"redis_url": url, "tag": "held"})
        with Client.connect(url, artifacts=artifacts) as client:
            run = client.submit(g)
            # Given the instance's work waiting inside the victim's engine, mid-denoising
            _wait_until(lambda: r.exists("held:in-engine"), timeout=120)
            assert r.get("held:completions") is None
            [held] = client.backend.store.instances(run.id)
            assert held.status == NodeStatus.RUNNING
            # When the victim dies there, and another worker (whose steps may pass) comes up
            kill(victim)
            r.set("held:gate", 1)
            survivor = worker()
            result = run.wait(timeout=120)
            events = list(run.events(follow=False))

        # Then the work ran again and completed once, with one result
        assert result.status == RunStatus.SUCCEEDED, result.failures
        assert result.outputs["held"].items == [{"value": 1}]
        assert int(r.get("held:bodies")) == 2
        assert int(r.get("held:completions")) == 1
        assert [e.type for e in events].count("instance.succeeded") == 1
    finally:
        kill(victim)
        if survivor is not None:
            kill(survivor)
