"""A worker whose Redis is away as it boots still joins the fair queue's window once Redis is
back: the heartbeat outlives a failed first beat (a Redis restart mid-boot left a worker out of
every window, so fair-queued work waited for it for good)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import dramatiq
import pytest
import redis
from dramatiq.brokers.stub import StubBroker

from genloop.workers.pool.redis_fair_queue import RedisFairQueue, RedisFairWorker


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_worker_booted_while_redis_was_away_joins_the_window_when_it_is_back(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    broker = StubBroker()
    broker.declare_queue("cpu")
    fair = RedisFairQueue(client, lambda chunk, delay: None, lambda run_id: run_id)
    middleware = RedisFairWorker(fair, "genloop", heartbeat=0.2)

    middleware.after_worker_boot(broker, dramatiq.Worker(broker, worker_threads=3))  # no Redis
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if client.zcard(fair.key("cpu", "workers")) == 1:
                    break
            except redis.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the worker never joined the window"
            time.sleep(0.05)
        assert client.zrange(fair.key("cpu", "workers"), 0, -1) == [
            f"{middleware.id}:3".encode()]
    finally:
        middleware.before_worker_shutdown(broker, None)
        server.terminate()
        server.wait()
