"""The embedded runtime's start-up imports only what it runs: time to the first image counts it."""

import json
import subprocess
import sys


def test_a_local_client_that_submits_imports_no_redis(tmp_path):
    # Given a fresh interpreter with a local back end (no worker threads: nothing runs)
    script = (
        "import json, sys\n"
        "from genloop.sdk import Client, Graph\n"
        f"with Client.local(home={str(tmp_path / 'home')!r}, threads=0) as client:\n"
        "    g = Graph()\n"
        "    g.generate('a red circle', n=1, model='tiny')\n"
        "    client.submit(g)\n"
        "print(json.dumps(sorted(m for m in ('redis', 'dramatiq.brokers.redis')\n"
        "                        if m in sys.modules)))\n"
    )
    # When it starts and submits a run
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    # Then redis was never imported (0.1 s of a cold start, for a broker it does not use)
    assert json.loads(out.splitlines()[-1]) == []
