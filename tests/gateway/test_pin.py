"""Pinning over HTTP: the owner pins and unpins, the retention pass keeps a pinned run, and
another tenant's pin is answered as for a run that does not exist."""

from __future__ import annotations

import time

import httpx
import pytest

from genloop.sdk import Graph, NotFound
from genloop.workers.retention import retention_pass


def images(label: str) -> Graph:
    g = Graph()
    g.add("gw-image", params={"label": label, "n": 1}, id="image")
    return g


def test_the_owner_pins_a_run_past_the_retention_and_unpins_it(stack):
    _, key = stack.tenant()
    run = stack.client(key).submit(images("keep"))
    run.wait(timeout=30)
    store, later = stack.backend.store, time.time() + 3 * stack.backend.store.retention

    assert run.pin().pinned and run.status().pinned
    retention_pass(store, store.retention, now=later)
    assert run.status().pinned

    assert not run.pin(False).pinned
    retention_pass(store, store.retention, now=later)
    with pytest.raises(NotFound):
        run.status()


def test_another_tenant_cannot_pin_or_unpin_a_run(stack):
    _, alice_key = stack.tenant()
    _, bob_key = stack.tenant()
    run = stack.client(alice_key).submit(images("mine"))
    run.wait(timeout=30)
    headers = {"Authorization": f"Bearer {bob_key}"}

    for method in ("PUT", "DELETE"):
        response = httpx.request(method, f"{stack.url}/v1/runs/{run.id}/pin", headers=headers)
        assert response.status_code == 404, (method, response.text)
        assert response.json()["code"] == "not_found"
    assert not run.status().pinned
