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
import subprocess

import redis
from metrics_util import free_ports
from wait_util import until

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """The server goes when the pytest worker does, even one killed with SIGKILL (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: atexit still stops it on a normal exit
        pass


def answers(port: int) -> bool:
    """Whether a Redis on 127.0.0.1:``port`` answers a PING."""
    try:
        with redis.Redis(port=port, socket_connect_timeout=0.5) as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


def use_own_redis() -> None:
    """On an xdist worker other than ``gw0``: start a Redis and point the suite at it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if worker == "gw0":
        return
    port = free_ports(1)
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    until(lambda: server.poll() is not None or answers(port),
          f"redis-server for pytest worker {worker} on port {port}")
    if server.poll() is not None:  # the port was taken between the pick and the bind
        raise RuntimeError(f"redis-server for pytest worker {worker} exited: port {port}")
    atexit.register(server.terminate)
    os.environ["GENLOOP_TEST_REDIS_PORT"] = str(port)
