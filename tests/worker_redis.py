"""A Redis of its own for each pytest-xdist worker after the first (``make test`` runs the suite
on two workers).

The suite owns whole Redis databases: the pool tests flush theirs before each test, Dramatiq's
queues and heartbeats have fixed names, worker pools left behind are found by port. Two
workers on one Redis would flush and consume each other's work, so worker ``gw0`` (and a run
without xdist) keeps the configured Redis (``GENLOOP_TEST_REDIS_PORT``, 6379 by default) and
every other worker starts a ``redis-server`` on a free port, exported before
:mod:`redis_util` reads it so that the worker processes a test starts inherit it too.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import time

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """The server goes when the pytest worker does, even one killed with SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: atexit still stops it on a normal exit
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--databases", "16"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return server
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"redis-server for pytest worker did not start on port {port}")
        time.sleep(0.05)


def use_own_redis() -> None:
    """On an xdist worker other than ``gw0``: start a Redis and point the suite at it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if worker == "gw0":
        return
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        try:
            server = _serve(port)
            break
        except RuntimeError:
            continue
    else:
        raise RuntimeError(f"no redis-server could be started for pytest worker {worker}")
    atexit.register(server.terminate)
    os.environ["GENLOOP_TEST_REDIS_PORT"] = str(port)
