"""``genloop keys`` and ``genloop serve``, as a user runs them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from server import console_sign_in

from genloop.gateway import SqliteGatewayStore
from genloop.workers.cli.main import main


def test_keys_create_list_revoke(tmp_path, capsys):
    home = str(tmp_path / "home")
    assert main(["keys", "create", "--local", home, "--tenant", "acme",
                 "--max-concurrent-runs", "3", "--max-cost", "50", "--models", "tiny,shapes",
                 "--evaluators", "clip"]) == 0
    key = capsys.readouterr().out.strip()
    store = SqliteGatewayStore(Path(home) / "gateway.db")
    assert store.tenant_of(key) == "acme"
    limits = store.limits("acme")
    assert (limits.max_concurrent_runs, limits.max_cost_per_run) == (3, 50.0)
    assert (limits.models, limits.evaluators) == (["tiny", "shapes"], ["clip"])
    assert main(["keys", "list", "--local", home]) == 0
    listed = capsys.readouterr().out
    assert "acme" in listed and "active" in listed and key not in listed
    assert main(["keys", "revoke", "--local", home, key]) == 0
    assert store.tenant_of(key) is None
    assert main(["keys", "revoke", "--local", home, "nope"]) == 1
    store.close()


def free_port() -> int:
    """A free port; serve binds it a moment later."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_local_answers_with_the_keys_made_by_keys_create(tmp_path, capsys):
    home = str(tmp_path / "home")
    main(["keys", "create", "--local", home, "--tenant", "acme"])
    key = capsys.readouterr().out.strip()
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "genloop.workers.cli.main", "serve", "--local", home, "--port",
         str(port), "--threads", "1", "--log-level", "warning",
         "--metrics-port", str(metrics_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "GENLOOP_METRICS_TOKEN": "ops-token"},
    )
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.2)
        assert httpx.get(f"{url}/readyz").json() == {"status": "ready"}
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{url}/v1/runs/{'0' * 32}", headers=auth).status_code == 404
        assert httpx.get(f"{url}/v1/runs/{'0' * 32}").status_code == 401
        # the console and the metrics come with it
        with httpx.Client(base_url=url, follow_redirects=True) as http:
            console = console_sign_in(http, key)
        assert console.status_code == 200 and "acme" in console.text
        # Metrics: on the operator's port, and on the tenants' port only with the token
        assert "genloop_runs_total" in httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert httpx.get(f"{url}/metrics", headers=auth).status_code == 401
        ops = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer ops-token"})
        assert "genloop_runs_total" in ops.text
    finally:
        proc.terminate()
        proc.wait(timeout=20)
