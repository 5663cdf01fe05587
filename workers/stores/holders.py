"""Lease owners that name their process, so a claimant can tell that a holder has died.

An owner id carries ``@host:pid:start`` (:func:`process_tag`), ``start`` being the process's
start time since boot (Linux ``/proc``), which tells a reused pid from the holder. A claimant on
the same host finds a lease whose holder process is gone and takes it at once, instead of
waiting out the lease (30 s on the embedded back end: a re-run after a SIGKILL of the same home
sat idle that long). Where the holder cannot be judged (another host, no ``/proc``, an owner
without a tag) nothing changes: the lease runs out as before, so a live holder's lease is never
taken.
"""

from __future__ import annotations

import os
import re
import socket
from functools import cache

_TAG = re.compile(r"@([^:@/]+):(\d+):(\d+)")


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces and parentheses); starttime is 22nd.
    return int(stat.rsplit(")", 1)[1].split()[19])


@cache
def process_tag() -> str:
    """``@host:pid:start`` for this process, or ``""`` where it cannot be told (no /proc)."""
    start = _start_time(os.getpid())
    return "" if start is None else f"@{socket.gethostname()}:{os.getpid()}:{start}"


def holder_gone(owner: str) -> bool:
    """Whether ``owner`` names a process of this host that no longer runs."""
    found = _TAG.search(owner)
    if found is None or not process_tag() or found[1] != socket.gethostname():
        return False
    return _start_time(int(found[2])) != int(found[3])
