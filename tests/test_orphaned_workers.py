"""The session-start guard against worker pools a killed test run left on the test Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from redis_util import PORT, _read, orphaned_workers, redis_url

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


def test_a_pool_under_a_mutmut_child_is_that_childs_own(tmp_path):
    """mutmut runs each mutant's tests in a forked child named ``mutmut: NAME`` under its own
    main process (pytest runs inside the child, so no ``pytest`` in any command line). The
    session of the other child must not take this child's pool for a killed run's: it exited
    3, which mutmut counts as a kill."""
    # (the pool's command and the file for the two pids come in the environment: in the
    # parent's command line they would make it look like a pool's main process, or a pytest)
    pids = tmp_path / "pids"
    env = {**os.environ, "GENLOOP_REDIS_URL": redis_url(4), "POSING": json.dumps(POSING),
           "PIDS": str(pids)}
    starts_one = ("import json, os, subprocess, time; "
                  "p = subprocess.Popen(json.loads(os.environ['POSING'])); "
                  "open(os.environ['PIDS'], 'w').write(f'{os.getpid()} {p.pid}'); "
                  "time.sleep(60)")
    # Given a posing worker pool whose parent calls itself a mutmut child, and is no descendant
    # of this session (the shell that started it exits at once; its process group holds both)
    shell = subprocess.Popen(
        ["bash", "-c", '(exec -a "mutmut: genloop.x__mutmut_1" "$@") >/dev/null 2>&1 &', "bash",
         sys.executable, "-c", starts_one], env=env, start_new_session=True)
    shell.wait()
    try:
        deadline = time.monotonic() + 10
        while len(written := (pids.read_text().split() if pids.exists() else [])) < 2 or \
                b"worker_main" not in _read(written[1], "cmdline"):  # until the pool has exec'd
            assert time.monotonic() < deadline, "the mutmut child did not start its pool"
            time.sleep(0.05)
        parent, pool = map(int, written)
        assert _read(str(parent), "cmdline").startswith(b"mutmut: ")
        # When the guard looks, Then it passes the pool over, and names it once orphaned
        assert pool not in [p for p, _ in orphaned_workers(PORT)]
        os.kill(parent, signal.SIGKILL)
        assert found(pool)
    finally:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
