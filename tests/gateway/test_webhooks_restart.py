"""A webhook survives ``kill -9`` of the gateway: ``genloop serve`` as a user runs it, killed
between two attempts, started again on the same home (embedded: SQLite outbox) or the same Redis
(with its worker pool, which lives on), delivers with the same webhook-id."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from gateway_settings import REDIS_DB, redis_url
from webhook_receiver import Receiver

from genloop.sdk import Graph
from genloop.sdk.webhooks import verify
from genloop.workers.cli.main import main

pytestmark = pytest.mark.slow


def serve(where: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "genloop.workers.cli.main", "serve", *where, "--port",
         str(port), "--threads", "2", "--log-level", "warning",
         "--webhook-allow", "127.0.0.1/32", "--webhook-backoff", "0.3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.TransportError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)


@contextmanager
def back_end(kind: str, tmp_path: Path) -> Iterator[list[str]]:
    """``genloop serve``'s arguments for ``kind``; for Redis a worker pool runs the runs."""
    if kind == "embedded":
        yield ["--local", str(tmp_path / "home")]
        return
    import redis

    url = redis_url(REDIS_DB + 2)  # a database of its own: the suite's stack uses REDIS_DB
    redis.Redis.from_url(url).flushdb()
    artifacts = f"file://{tmp_path / 'artifacts'}"
    log = (tmp_path / "pool.log").open("w")
    pool = subprocess.Popen(
        [sys.executable, "-m", "genloop.workers.cli.main", "worker", "--redis", url, "--artifacts",
         artifacts, "--queues", "gpu,cpu", "--processes", "1", "--threads", "2"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 90
        while not redis.Redis.from_url(url).hexists("genloop:ops", "generate"):
            assert pool.poll() is None and time.monotonic() < deadline, "no worker pool"
            time.sleep(0.1)
        yield ["--redis", url, "--artifacts", artifacts]
    finally:
        os.killpg(pool.pid, signal.SIGKILL)
        pool.wait()
        log.close()


@pytest.mark.parametrize("kind", ["embedded", "redis"])
def test_a_delivery_left_by_a_killed_gateway_is_made_by_the_next(kind, tmp_path, capsys):
    with back_end(kind, tmp_path) as where:
        delivered_after_a_kill(where, capsys)


def delivered_after_a_kill(where: list[str], capsys) -> None:
    main(["keys", "create", *where[:2], "--tenant", "acme"])
    key = capsys.readouterr().out.strip()
    auth = {"Authorization": f"Bearer {key}"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    receiver = Receiver([500] * 1000)  # fails until the gateway is killed
    proc = serve(where, port)
    try:
        secret = httpx.post(f"{url}/v1/webhooks/secret", headers=auth).json()["secret"]
        g = Graph(webhook={"url": receiver.url})
        g.generate("a red circle", n=1, steps=1, model="tiny", id="gen")
        run_id = httpx.post(f"{url}/v1/runs", content=g.model_dump_json(), headers={
            **auth, "Content-Type": "application/json"}).json()["id"]
        receiver.wait_for(1, timeout=120)  # a first attempt failed
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with receiver.lock:
            receiver.statuses.clear()  # from now on it answers 200
            tried = len(receiver.deliveries)

        proc = serve(where, port)
        deliveries = receiver.wait_for(tried + 1, timeout=60)

        assert {h["webhook-id"] for h, _, _ in deliveries} == {f"msg_{run_id}"}
        verify(deliveries[-1][0], deliveries[-1][1], secret)
        deadline = time.monotonic() + 10
        while (job := httpx.get(f"{url}/v1/webhooks/{run_id}", headers=auth).json())[
                "state"] != "delivered":
            assert time.monotonic() < deadline, job
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
        receiver.close()
