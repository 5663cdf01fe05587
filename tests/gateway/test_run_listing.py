"""Finding runs again: labels on a submission, ``GET /v1/runs`` paged by cursor and filtered,
and the SDK's ``client.runs()``; a tenant sees only its own runs."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from genloop.sdk import Graph, RunStatus
from genloop.sdk.wire import ApiError


def quick(label: str, **labels: str) -> Graph:
    g = Graph(labels=labels)
    g.add("gw-wait", params={"label": label}, id="wait")
    return g


def test_a_thousand_runs_page_by_cursor_without_gaps_or_repeats_while_runs_arrive(stack):
    _, key = stack.tenant()
    _, other = stack.tenant()
    client = stack.client(key)
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda i: client.submit(quick(f"r{i}")).id, range(1000)))
    stack.client(other).submit(quick("theirs"))

    seen, cursor, pages = [], None, 0
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}) as http:
        while True:
            params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            response = http.get("/v1/runs", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            seen += [r["id"] for r in page["runs"]]
            pages += 1
            client.submit(quick(f"late{pages}"))  # newer than every page: lands before the first
            if not (cursor := page["next"]):
                break
    assert len(seen) == len(set(seen)) == 1000 and set(seen) == ids
    created = [client.get(run_id).info.created_at for run_id in seen[::97]]
    assert created == sorted(created, reverse=True)


def test_runs_are_found_by_labels_and_status_and_time(stack):
    _, key = stack.tenant()
    client = stack.client(key)
    start = time.time()
    a = client.submit(quick("a", session="s1", user="ann"))
    b = client.submit(quick("b", session="s1", user="bob"))
    c = client.submit(quick("c", session="s2"))
    slow = Graph(labels={"session": "s1"})
    slow.add("gw-wait", params={"sleep": 30}, id="wait")
    running = client.submit(slow)
    for run in (a, b, c):
        run.wait(timeout=60)

    def ids(**filters) -> list[str]:
        return [r.id for r in client.runs(page_size=2, **filters)]

    assert ids(labels={"session": "s1"}) == [running.id, b.id, a.id]
    assert ids(labels={"session": "s1", "user": "bob"}) == [b.id]
    assert ids(labels={"session": "s1"}, status=["succeeded"]) == [b.id, a.id]
    assert ids(status=[RunStatus.RUNNING, RunStatus.PENDING]) == [running.id]
    assert ids(since=start, until=b.info.created_at + 1e-6) == [b.id, a.id]
    listed = next(client.runs(labels={"user": "ann"}))
    assert listed.labels == {"session": "s1", "user": "ann"} and listed.nodes == []
    assert client.get(a.id).info.labels == {"session": "s1", "user": "ann"}

    async def listed_async() -> list[str]:
        async with stack.aclient(key) as aclient:
            return [r.id async for r in aclient.runs(labels={"session": "s2"})]

    assert asyncio.run(listed_async()) == [c.id]
    running.cancel()


def test_bad_labels_and_cursors_are_refused(stack):
    _, key = stack.tenant()
    for bad in ("bad key!", "", "k" * 64):
        with pytest.raises(ValueError):
            Graph(labels={bad: "x"})
    with pytest.raises(ValueError):
        Graph(labels={f"k{i}": "x" for i in range(17)})
    body = quick("x").model_dump(mode="json") | {"labels": {"k": "v" * 201}}
    response = httpx.post(f"{stack.url}/v1/runs", json=body,
                          headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 422
    for params in ({"cursor": "not-a-cursor"}, {"label": "no-equals-sign"},
                   {"status": "sleeping"}):
        response = httpx.get(f"{stack.url}/v1/runs", params=params,
                             headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 422, (params, response.text)
        assert ApiError.model_validate_json(response.content).code == "invalid_request"
