"""A re-run after a crash of the same home takes up the dead process's claims at once: a lease
names its holder's process, and a holder that no longer runs holds nothing. A live holder keeps
its lease, and a holder that cannot be judged keeps it until it runs out, as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from genloop.workers.stores.holders import process_tag
from genloop.workers.stores.sqlite import SqliteStateStore

HOLDER = textwrap.dedent("""
    import sys
    from genloop.workers.stores.holders import process_tag
    from genloop.workers.stores.sqlite import SqliteStateStore

    store = SqliteStateStore(sys.argv[1])
    assert store.claim("result-key", "worker-other" + process_tag(), ttl=60.0)
    assert store.try_lock("sweeper", "sweeper-other" + process_tag(), ttl=60.0)
    print("held", flush=True)
    sys.stdin.read()  # hold until killed
""")


def test_the_claims_of_a_killed_process_are_taken_at_once(tmp_path):
    store = SqliteStateStore(tmp_path / "state.db")
    mine = "worker-mine" + process_tag()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "state.db")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        # While the holder lives its lease is its own.
        assert not store.claim("result-key", mine, ttl=60.0)
        assert not store.try_lock("sweeper", mine, ttl=60.0)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        # Gone, it holds nothing, though its leases have about a minute left.
        assert store.lease_remaining("result-key") > 50
        assert store.claim("result-key", mine, ttl=60.0)
        assert store.try_lock("sweeper", mine, ttl=60.0)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_holder_that_cannot_be_judged_keeps_its_lease(tmp_path):
    store = SqliteStateStore(tmp_path / "state.db")
    assert process_tag()  # Linux: this process can be named
    assert store.claim("k", "worker-untagged", ttl=60.0)  # an owner from an older version
    assert not store.claim("k", "worker-mine" + process_tag(), ttl=60.0)
    # A tag of another host is not judged here either.
    assert store.claim("k2", "worker-far@some-other-host:1:1", ttl=60.0)
    assert not store.claim("k2", "worker-mine" + process_tag(), ttl=60.0)
