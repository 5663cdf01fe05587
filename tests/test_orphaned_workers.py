"""The session-start guard against worker pools a killed test run left on the test Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from redis_util import PORT, orphaned_workers, redis_url

#: Looks like `genloop worker`'s Dramatiq main process to /proc, and only sleeps.
POSING = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "dramatiq",
          "genloop.workers.pool.worker_main", "--processes", "1"]


def spawn(parent_is_pytest: bool) -> int:
    """A posing worker on the test Redis, a child of this session or an orphan (its parent,
    a shell, exits at once: it is re-parented as a killed session's pool would be)."""
    env = {**os.environ, "GENLOOP_REDIS_URL": redis_url(4)}
    if parent_is_pytest:
        return subprocess.Popen(POSING, env=env, start_new_session=True).pid
    shell = subprocess.run(["sh", "-c", '"$@" >/dev/null 2>&1 & echo $!', "sh", *POSING],
                           env=env, capture_output=True, text=True, check=True,
                           start_new_session=True)
    return int(shell.stdout)


def found(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while not any(p == pid for p, _ in orphaned_workers(PORT)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_pool_left_by_a_killed_run_is_found_and_this_sessions_own_is_not():
    # Given a posing worker pool whose parent is gone, and one this session started
    orphan, own = spawn(parent_is_pytest=False), spawn(parent_is_pytest=True)
    try:
        # When the guard looks; Then it names the orphan only
        assert found(orphan)
        assert own not in [p for p, _ in orphaned_workers(PORT)]
        # And a pool on another Redis is none of its business
        assert orphan not in [p for p, _ in orphaned_workers(PORT + 1)]
    finally:
        for pid in (orphan, own):
            os.kill(pid, signal.SIGKILL)
    os.waitpid(own, 0)
