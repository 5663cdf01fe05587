"""Pinning over HTTP: the owner pins and unpins (what a pin keeps is the stores' contract,
tests/contract/test_retention.py), another tenant's pin is answered as for a run that does not
exist."""

from __future__ import annotations

import httpx

from genloop.sdk import Graph


def images(label: str) -> Graph:
    g = Graph()
    g.add("gw-image", params={"label": label, "n": 1}, id="image")
    return g


def test_the_owner_pins_and_unpins_a_run(stack):
    _, key = stack.tenant()
    run = stack.client(key).submit(images("keep"))
    run.wait(timeout=30)

    assert run.pin().pinned and run.status().pinned
    assert not run.pin(False).pinned and not run.status().pinned


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
