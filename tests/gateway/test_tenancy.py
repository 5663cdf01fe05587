"""Tenants see only their own runs, results, events and artifacts; others get 404."""

from __future__ import annotations

import time

import httpx
import pytest

from genloop.gateway.service import artifact_keys
from genloop.sdk import Graph, NotFound, RunStatus


def images(label: str) -> Graph:
    g = Graph()
    g.add("gw-image", params={"label": label, "n": 2}, id="image")
    return g


def test_another_tenant_gets_404_for_runs_results_events_and_artifacts(stack):
    # Given alice's finished run with two images
    _, alice_key = stack.tenant()
    _, bob_key = stack.tenant()
    alice, bob = stack.client(alice_key), stack.client(bob_key)
    run = alice.submit(images("secret"))
    result = run.wait(timeout=30)
    artifact = result.items("image")[0]["artifact"]
    assert alice.read_artifact(artifact) == b"secret:0"
    # When bob asks for any of it, by the SDK or raw HTTP
    headers = {"Authorization": f"Bearer {bob_key}"}
    no_run, no_artifact = f"no run {run.id!r}", f"no artifact {artifact!r}"
    for path, message in ((f"/v1/runs/{run.id}", no_run), (f"/v1/runs/{run.id}/result", no_run),
                          (f"/v1/runs/{run.id}/events?follow=false", no_run),
                          (f"/v1/artifacts/{artifact}", no_artifact)):
        response = httpx.get(stack.url + path, headers=headers)
        # Then the answer is the one for something that does not exist
        assert response.status_code == 404, path
        assert (response.json()["code"], response.json()["message"]) == ("not_found", message)
    response = httpx.post(f"{stack.url}/v1/runs/{run.id}/cancel", headers=headers)
    assert response.status_code == 404
    with pytest.raises(NotFound):
        bob.get(run.id)
    with pytest.raises(NotFound):
        bob.read_artifact(artifact)
    # And alice's run is untouched
    assert alice.get(run.id).status().status == RunStatus.SUCCEEDED


def test_another_tenant_cannot_cancel_resume_or_answer_a_run_its_owner_can(stack):
    # Given alice's finished run
    _, alice_key = stack.tenant()
    _, bob_key = stack.tenant()
    alice, bob = stack.client(alice_key), stack.client(bob_key)
    run = alice.submit(images("mine"))
    run.wait(timeout=30)
    before = alice.get(run.id).status()
    # When bob posts any of the calls that act on a run, by raw HTTP or the SDK
    headers = {"Authorization": f"Bearer {bob_key}"}
    answer = {"requests": [{"prompt": "bob's prompt", "seed": 1, "round": 2}]}
    for action, body in (("cancel", None), ("resume", None), ("refine", answer)):
        response = httpx.post(f"{stack.url}/v1/runs/{run.id}/{action}", headers=headers,
                              json=body)
        # Then each is answered as for a run that does not exist
        assert response.status_code == 404, (action, response.text)
        assert response.json()["code"] == "not_found"
    with pytest.raises(NotFound):
        bob.resume(run.id)
    # And alice's run is as it was
    assert alice.get(run.id).status() == before
    # And alice's own calls reach it: her ended run is answered as it is, and an answer no
    # refine waits for is a conflict, not a missing run
    mine = {"Authorization": f"Bearer {alice_key}"}
    for action, body, status in (("cancel", None, 200), ("resume", None, 200),
                                 ("refine", answer, 409)):
        response = httpx.post(f"{stack.url}/v1/runs/{run.id}/{action}", headers=mine,
                              json=body)
        assert response.status_code == status, (action, response.text)
    assert alice.get(run.id).status() == before


def test_artifact_visible_once_in_a_result_even_if_never_fetched(stack):
    # Given a run whose result the tenant never fetched through the gateway
    _, key = stack.tenant()
    client = stack.client(key)
    client.submit(images("lazy")).wait(timeout=30)
    _, other_key = stack.tenant()
    other_run = stack.client(other_key).submit(images("lazy-other"))
    deadline = time.monotonic() + 30
    while not stack.backend.get(other_run.id).status.terminal:  # not Run.wait: it reads results
        assert time.monotonic() < deadline
        time.sleep(0.05)
    key_of_other = stack.backend.result(other_run.id).items("image")[1]["artifact"]
    # Then it is readable by its owner (indexed on demand), with content type and ETag
    response = httpx.get(f"{stack.url}/v1/artifacts/{key_of_other}",
                         headers={"Authorization": f"Bearer {other_key}"})
    assert response.status_code == 200
    assert response.content == b"lazy-other:1"
    assert response.headers["content-type"] == "image/png"
    etag = response.headers["etag"]
    assert etag == f'"{key_of_other.split(".")[0]}"'
    again = httpx.get(f"{stack.url}/v1/artifacts/{key_of_other}",
                      headers={"Authorization": f"Bearer {other_key}", "If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    # And still not by the first tenant
    with pytest.raises(NotFound):
        client.read_artifact(key_of_other)


def test_revoked_key_is_refused(stack):
    _, key = stack.tenant()
    client = stack.client(key)
    client.submit(images("revoke")).wait(timeout=30)
    assert stack.store.revoke(key) is not None
    auth = {"Authorization": f"Bearer {key}"}
    response = httpx.get(f"{stack.url}/v1/runs/whatever", headers=auth)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


def test_a_tenants_artifacts_are_found_at_any_depth_of_a_result_and_only_valid_keys_count():
    # Given a result whose items hold artifact keys at the top, inside nested dicts and lists,
    # and an "artifact" that is no key
    top, nested, listed = (f"{c * 64}.png" for c in "abc")
    outputs = {"image": [{"artifact": top, "meta": {"mask": {"artifact": nested}},
                          "parts": [[{"artifact": listed}]]},
                         {"artifact": "../../etc/passwd"}, {"artifact": 7}]}
    # When the gateway lists what the tenant may read
    # Then every key is found, wherever it sits, and nothing else
    assert sorted(artifact_keys(outputs)) == [top, nested, listed]
