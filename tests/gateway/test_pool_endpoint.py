"""``GET /v1/pool``: the worker pool behind a gateway, for the operator's token only."""

from __future__ import annotations

import httpx
from gateway_settings import METRICS_TOKEN


def test_the_pool_behind_the_gateway_is_shown_to_the_operator_only(stack):
    url = f"{stack.url}/v1/pool"
    _, key = stack.tenant()
    # A tenant's key is not the operator's token
    assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 401
    answer = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    if stack.kind == "embedded":  # one process, no pool
        assert answer.status_code == 404, answer.text
        return
    assert answer.status_code == 200, answer.text
    status = answer.json()
    [worker] = status["workers"]
    assert set(worker["queues"]) == {"gpu", "cpu"} and worker["threads"] == 4
    assert {q["queue"]: q["workers"] for q in status["queues"]} == {"gpu": 1, "cpu": 1}
