"""The delivery-latency goal, run as a user runs its benchmark: after a run ends its webhook
arrives within 1 s for 95% of runs (``benchmarks/webhooks.py``, loopback, 8 at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "webhooks.py"
#: The goal itself (issue #44): measured here 0.1-0.5 s on a loaded 2-core box.
P95_GOAL = 1.0


def test_p95_delivery_latency_after_the_run_ends_is_within_a_second():
    done = subprocess.run([sys.executable, str(BENCHMARK), "--runs", "40", "--concurrency", "8",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert report["delivered"] == 40
    assert report["p95_s"] <= P95_GOAL, report
