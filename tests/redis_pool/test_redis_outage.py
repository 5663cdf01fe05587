"""Redis restarted mid-run, and a run whose artifacts live in S3."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time

import pytest
import redis
from redis_util import NO_DRAMATIQ_REQUEUE_MS
from s3_util import S3_ENV, moto_server

from genloop.sdk import Client, Graph, RunStatus, RunTimeout

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)  # recovery times: pytest -o log_cli=true --log-cli-level=INFO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_redis(port: int, data_dir) -> subprocess.Popen:
    proc = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
         "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def _graph(url: str, tag: str, log: str) -> Graph:
    g = Graph()
    render = g.add("test-render", id="render", params={
        "redis_url": url, "tag": tag, "n": 8, "shard_size": 2, "seconds": 0.3})
    g.add("test-sum", id="sum", inputs=[render], params={"log": log})
    return g


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_redis_restarted_mid_run_loses_nothing(tmp_path, pool):
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = _start_redis(port, tmp_path)
    pool.url = url
    try:
        # Dramatiq's heartbeat requeue is pushed out of reach: in-flight messages left in a
        # live worker's ack set come back through genloop's sweeper alone.
        pool.start(threads=3, heartbeat_ms=NO_DRAMATIQ_REQUEUE_MS)
        pool.wait_ready(redis.Redis(port=port))
        with Client.connect(url) as client:
            run = client.submit(_graph(url, "outage", str(tmp_path / "log")))
            while not redis.Redis(port=port).get("outage:bodies"):
                time.sleep(0.01)
            server.kill()  # SIGKILL: whatever was fsynced to the AOF is all that survives
            server.wait()
            time.sleep(2.0)
            server = _start_redis(port, tmp_path)
            back_at = time.monotonic()

            result = run.wait(timeout=90)  # the goal: done within 90 s of Redis being back
            log.info("finished_after_redis_back_s=%.1f", time.monotonic() - back_at)
            events = list(run.events(follow=False))

        assert result.status == RunStatus.SUCCEEDED, result.failures
        assert result.outputs["sum"].items == [{"value": sum(range(8))}]
        done = [e.instance_id for e in events if e.type == "instance.succeeded"]
        assert sorted(done) == sorted(set(done)), "an instance's result was recorded twice"
    finally:
        pool.close()
        server.kill()
        server.wait()


def test_a_run_with_artifacts_in_s3(tmp_path, pool, redis_client):
    import boto3

    with moto_server() as endpoint:
        env = {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="art")
        pool.artifacts = "s3://art/genloop"
        pool.start(threads=2, env=env)
        pool.wait_ready(redis_client)
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            with Client.connect(pool.url) as client:  # artifacts: as the workers published
                result = client.submit(_graph(pool.url, "s3", str(tmp_path / "log"))).wait(
                    timeout=120)
                assert result.status == RunStatus.SUCCEEDED
                key = client.backend.artifacts.put(b"candidate s3 3", "png")
                assert client.read_artifact(key) == b"candidate s3 3"
                assert client.backend.artifacts.exists(
                    client.backend.artifacts.put(b"candidate s3 0", "png"))


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_message_lost_with_a_redis_restart_runs_within_the_documented_bound(tmp_path, pool):
    """README, "Recovery": a message lost (here: the moment Redis was killed) runs again within
    ``L + 2S`` of Redis being back, L the lease TTL and S the sweeper's tick."""
    import os
    import signal

    lease, tick = 1.5, 1.0  # the pool fixture's
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = _start_redis(port, tmp_path)
    pool.url = url
    try:
        worker = pool.start(threads=2, log=tmp_path / "worker.log")
        pool.wait_ready(redis.Redis(port=port))
        os.killpg(worker.pid, signal.SIGSTOP)  # the pool cannot take the message yet
        with Client.connect(url) as client:
            g = Graph()
            g.add("test-count", id="count", params={"log": str(tmp_path / "log"), "value": 3})
            run = client.submit(g)
            # The message is lost: gone from Dramatiq's queues and from the fair queue, the
            # run's records kept; then Redis dies and comes back from its append-only file
            r = redis.Redis(port=port)
            lost = [k for pattern in ("dramatiq:*", "genloop:fair:*")
                    for k in r.scan_iter(pattern)
                    if not k.endswith((b"__heartbeats__", b":workers"))]
            assert lost and r.delete(*lost)
            server.kill()
            server.wait()
            server = _start_redis(port, tmp_path)
            back_at = time.monotonic()
            os.killpg(worker.pid, signal.SIGCONT)

            try:
                result = run.wait(timeout=60)
            except RunTimeout:
                raise AssertionError((tmp_path / "worker.log").read_text()[-3000:]) from None
            took = time.monotonic() - back_at
        log.info("lost_message_ran_after_redis_back_s=%.1f", took)
        assert result.status == RunStatus.SUCCEEDED
        assert took <= lease + 2 * tick + 3.0, took  # 3 s for the run itself on a loaded box
    finally:
        pool.close()
        server.kill()
        server.wait()
