"""Settings the gateway tests share (a module of its own: test modules cannot import from a
conftest reliably when several folders have one)."""

from __future__ import annotations

import os

from redis_util import HOST, PORT

#: Redis databases of this suite: the back end and pool, and the store contract test.
REDIS_DB = int(os.environ.get("GENLOOP_TEST_GATEWAY_REDIS_DB", "12"))
STORE_DB = REDIS_DB + 1
MAX_BODY = 64_000
#: The operator's token for /metrics and /v1/pool on the test gateways.
METRICS_TOKEN = "test-operator"


def redis_url(db: int) -> str:
    return f"redis://{HOST}:{PORT}/{db}"
