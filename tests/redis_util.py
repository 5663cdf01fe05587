"""Where the tests' Redis is: 127.0.0.1:6379 (started by .ci/run when it is not up), or the port in
``GENLOOP_TEST_REDIS_PORT`` so that two checkouts can run their suites side by side.

Store contract tests share ``DB`` under a random key prefix each; the worker-pool tests own
``POOL_DB`` and flush it before each test. The gateway suite uses databases from 10 up.
"""

from __future__ import annotations

import os

HOST = "127.0.0.1"
PORT = int(os.environ.get("GENLOOP_TEST_REDIS_PORT", "6379"))
DB = int(os.environ.get("GENLOOP_TEST_REDIS_DB", "3"))
POOL_DB = DB + 1


def redis_url(db: int = DB) -> str:
    return f"redis://{HOST}:{PORT}/{db}"
