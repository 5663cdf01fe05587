"""Worker pools of real ``genloop worker`` processes on the test Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from redis_util import POOL_DB, redis_url

TESTS = Path(__file__).resolve().parents[1]
#: Where Dramatiq's RedisBroker records a heartbeat per worker process (its broker id).
HEARTBEATS = "dramatiq:__heartbeats__"


class Pool:
    """Starts worker process groups; kills what is left at teardown."""

    def __init__(self, url: str, artifacts: str) -> None:
        self.url, self.artifacts = url, artifacts
        self.procs: list[subprocess.Popen] = []
        #: Per start: the Dramatiq brokers seen before it, and its worker processes.
        self._starts: list[tuple[set, int]] = []

    def start(self, processes: int = 1, threads: int = 2, queues: str = "gpu,cpu",
              heartbeat_ms: int = 1500, lease_ttl: float = 1.5,
              env: dict | None = None, args: tuple[str, ...] = (),
              log: Path | None = None) -> subprocess.Popen:
        """``log``: a file for the workers' own log (a failing test shows it), else none."""
        with redis.Redis.from_url(self.url) as client:
            self._starts.append((set(client.zrange(HEARTBEATS, 0, -1)), processes))
        full_env = {**os.environ, "PYTHONPATH": str(TESTS), "GENLOOP_MAINTENANCE_CHANCE": "1000000",
                    "GENLOOP_SWEEP_EVERY": "1", **(env or {})}
        proc = subprocess.Popen(
            [sys.executable, "-m", "genloop.workers.cli.main", "worker", "--redis", self.url,
             "--artifacts", self.artifacts, "--queues", queues, "--processes", str(processes),
             "--threads", str(threads), "--import", "genloop_test_ops",
             "--heartbeat-timeout-ms", str(heartbeat_ms), "--lease-ttl", str(lease_ttl),
             *args],
            env=full_env, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if log is None else log.open("w"),
        )
        self.procs.append(proc)
        return proc

    def wait_ready(self, client: redis.Redis, timeout: float = 60) -> None:
        """Until the workers have published their catalogue (they finished importing) and every
        process started is in its consumer loop: Dramatiq's broker records a heartbeat for its
        process with each fetch (and a submitting client's with each send), so each start
        waits for as many brokers new since it as the processes started from it on."""
        deadline = time.monotonic() + timeout

        def ready() -> bool:
            seen = set(client.zrange(HEARTBEATS, 0, -1))
            return all(len(seen - before) >= sum(n for _, n in self._starts[i:])
                       for i, (before, _) in enumerate(self._starts))

        while not (client.hexists("genloop:ops", "test-render") and ready()):
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(redis_url(POOL_DB))
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def pool(redis_client, tmp_path):
    p = Pool(redis_url(POOL_DB), f"file://{tmp_path / 'artifacts'}")
    yield p
    p.close()
