"""The suite's second xdist process gets a Redis of its own (tests/worker_redis.py), and the
server goes with the process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from redis_util import PORT
from worker_redis import answers

TESTS = Path(__file__).parent
CHILD = """
import os, sys
from worker_redis import use_own_redis
use_own_redis()
print(os.environ.get("GENLOOP_TEST_REDIS_PORT", ""), flush=True)
sys.stdin.read()  # held until the test closes stdin
"""


def _child(worker: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "PYTEST_XDIST_WORKER": worker,
           "GENLOOP_TEST_REDIS_PORT": str(PORT)}
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def test_the_first_worker_keeps_the_configured_redis():
    child = _child("gw0")
    assert child.stdout.readline().strip() == str(PORT)
    child.communicate("")


def test_another_worker_serves_its_own_redis_until_it_exits():
    child = _child("gw1")
    port = int(child.stdout.readline())
    assert port != PORT and answers(port)
    child.communicate("")
    deadline = time.monotonic() + 10
    while answers(port):
        assert time.monotonic() < deadline, f"the Redis on {port} outlived its worker"
        time.sleep(0.05)
