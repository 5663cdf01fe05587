"""Lease holders named by process (``workers/stores/holders.py``): a claimant on the same host
takes a lease at once only when the holder's process is gone; a live holder, another host's or
an untagged one keeps its lease until it runs out."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from genloop.workers.stores.holders import holder_gone, process_tag


def _start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def test_this_process_is_tagged_with_its_host_pid_and_start_time():
    assert process_tag() == f"@{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def test_a_live_holder_keeps_its_lease_and_a_dead_or_reused_pid_is_gone(tmp_path):
    host = socket.gethostname()
    assert not holder_gone(f"worker-1{process_tag()}")
    # The same pid with another start time: the holder died and its pid was reused
    assert holder_gone(f"worker-1@{host}:{os.getpid()}:{_start_time(os.getpid()) + 1}")
    # A process that ran and ended; its command name holds ") " and spaces, which /proc's stat
    # shows unescaped before the fields that are read
    named = tmp_path / "a) b) c"
    named.symlink_to(sys.executable)
    child = subprocess.Popen([named, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    tag = f"@{host}:{child.pid}:{_start_time(child.pid)}"
    assert not holder_gone(f"w{tag}")
    child.communicate(b"")
    assert holder_gone(f"w{tag}")


def test_a_holder_on_another_host_or_without_a_tag_is_never_judged_gone():
    assert not holder_gone(f"w@another-host:{os.getpid()}:1")
    assert not holder_gone("w-without-a-tag")
