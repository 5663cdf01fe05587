"""Where the tests' Redis is: 127.0.0.1:6379 (started by .ci/run when it is not up), or the port in
``GENLOOP_TEST_REDIS_PORT`` so that two checkouts can run their suites side by side.

Store contract tests share ``DB`` under a random key prefix each; the worker-pool tests own
``POOL_DB`` and flush it before each test. The gateway suite uses databases from 10 up.
:func:`orphaned_workers` finds worker pools a killed test run left on this Redis (the session
refuses to start beside them).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

HOST = "127.0.0.1"
PORT = int(os.environ.get("GENLOOP_TEST_REDIS_PORT", "6379"))
DB = int(os.environ.get("GENLOOP_TEST_REDIS_DB", "3"))
POOL_DB = DB + 1
#: A pool's ``--heartbeat-timeout-ms`` that puts Dramatiq's own requeue of a silent worker's
#: unacked messages out of a test's reach, for tests of genloop's own recovery and drain (as
#: production's 60 s is out of reach of its 30 s grace).
NO_DRAMATIQ_REQUEUE_MS = 600_000


def redis_url(db: int = DB) -> str:
    return f"redis://{HOST}:{PORT}/{db}"


def _read(pid: str, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return b""


def _redis_port(environ: bytes) -> int | None:
    """The port of the Redis a worker process was started on (``GENLOOP_REDIS_URL``)."""
    for entry in environ.split(b"\0"):
        if entry.startswith(b"GENLOOP_REDIS_URL="):
            url = urlsplit(entry.split(b"=", 1)[1].decode(errors="replace"))
            return url.port if url.hostname in ("127.0.0.1", "localhost") else None
    return None


def orphaned_workers(port: int = PORT) -> list[tuple[int, int]]:
    """``(pid, parent pid)`` of each ``genloop worker`` pool (Dramatiq's main process) on the
    Redis at ``port`` that no test session started: one a killed test run left behind. It
    runs the code it started with and takes the tests' messages, so tests fail in ways that
    point nowhere near it. Reads ``/proc`` only (Linux); elsewhere it finds nothing."""
    if not os.path.isdir("/proc"):
        return []
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        argv = _read(pid, "cmdline").split(b"\0")
        if b"dramatiq" not in argv or b"genloop.workers.pool.worker_main" not in argv:
            continue
        if _redis_port(_read(pid, "environ")) != port:
            continue
        parent = _parent(int(pid))
        if b"genloop.workers.pool.worker_main" in _read(str(parent), "cmdline"):
            continue  # one of a pool's forked worker processes: its main one is judged
        if not _under_pytest(parent):
            found.append((int(pid), parent))
    return sorted(found)


def _parent(pid: int) -> int:
    stat = _read(str(pid), "stat")
    return int(stat.rsplit(b")", 1)[1].split()[1]) if stat else 0


def _under_pytest(pid: int) -> bool:
    """Whether ``pid`` is a test session or one of its descendants: a pool a test started has
    the session as its parent, or an xdist worker (``python -c ...``) that pytest started, or a
    mutmut child (``mutmut: NAME``: it runs pytest in its own process, beside another child
    whose session must not take this pool for a killed run's). A killed session's pool is
    re-parented to init or a subreaper, above any session."""
    while pid > 1:
        cmdline = _read(str(pid), "cmdline")
        if b"pytest" in cmdline or cmdline.startswith(b"mutmut: "):
            return True
        pid = _parent(pid)
    return False
