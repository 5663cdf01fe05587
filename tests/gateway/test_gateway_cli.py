"""``genloop keys`` and ``genloop serve``, as a user runs them."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from genloop.workers.cli import main
from genloop.workers.gateway import SqliteGatewayStore


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


def test_serve_local_answers_with_the_keys_made_by_keys_create(tmp_path, capsys):
    home = str(tmp_path / "home")
    main(["keys", "create", "--local", home, "--tenant", "acme"])
    key = capsys.readouterr().out.strip()
    with socket.socket() as probe:  # a free port; serve binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "genloop.workers.cli", "serve", "--local", home, "--port",
         str(port), "--threads", "1", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
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
        console = httpx.post(f"{url}/ui/login", data={"api_key": key}, follow_redirects=True)
        assert console.status_code == 200 and "acme" in console.text
        assert "genloop_runs_total" in httpx.get(f"{url}/metrics").text
    finally:
        proc.terminate()
        proc.wait(timeout=20)
