"""A webhook survives ``kill -9`` of the gateway: ``genloop serve`` as a user runs it, killed
between two attempts, started again on the same home, delivers with the same webhook-id."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from webhook_receiver import Receiver

from genloop.sdk import Graph
from genloop.sdk.webhooks import verify
from genloop.workers.cli import main

pytestmark = pytest.mark.slow


def serve(home: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "genloop.workers.cli", "serve", "--local", home, "--port",
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


def test_a_delivery_left_by_a_killed_gateway_is_made_by_the_next(tmp_path, capsys):
    home = str(tmp_path / "home")
    main(["keys", "create", "--local", home, "--tenant", "acme"])
    key = capsys.readouterr().out.strip()
    auth = {"Authorization": f"Bearer {key}"}
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    receiver = Receiver([500] * 1000)  # fails until the gateway is killed
    proc = serve(home, port)
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

        proc = serve(home, port)
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
