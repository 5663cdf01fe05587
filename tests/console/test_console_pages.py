"""The console's pages without a browser: paging of the runs list, forms that need the page's
token, and the sign-in redirect staying inside the console."""

from __future__ import annotations

import re

import httpx

from genloop.sdk import Client, Graph, RunStatus


def signed_in(console, key: str) -> httpx.Client:
    http = httpx.Client(base_url=console.url, follow_redirects=True)
    assert http.post("/ui/login", data={"api_key": key}).status_code == 200  # followed to /runs
    return http


def test_the_runs_list_pages_newest_first(console, tmp_path):
    import genloop_test_ops  # noqa: F401  (test-count: a cheap op)

    key = console.key("pager")
    client = Client.http(console.url, api_key=key)
    runs = []
    for i in range(23):
        g = Graph()
        g.add("test-count", id="n", params={"log": str(tmp_path / "log"), "value": i})
        runs.append(client.submit(g))
    for run in runs:
        assert run.wait(timeout=60).status == RunStatus.SUCCEEDED
    http = signed_in(console, key)

    first = http.get("/ui/runs").text
    older = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = http.get(older).text

    ids = [r.id for r in reversed(runs)]
    assert re.findall(r'<tr data-run="([0-9a-f]+)"', first) == ids[:20]
    assert re.findall(r'<tr data-run="([0-9a-f]+)"', second) == ids[20:]
    assert 'rel="next"' not in second


def test_cancel_needs_the_pages_token_and_sign_in_goes_only_to_the_console(console):
    import genloop_test_ops  # noqa: F401

    key = console.key("forms")
    g = Graph()
    g.add("test-count", id="slow", params={"log": "/dev/null", "sleep": 30})
    run = Client.http(console.url, api_key=key).submit(g)
    http = signed_in(console, key)

    forged = http.post(f"/ui/runs/{run.id}/cancel", data={"token": "0" * 32})
    page = http.get(f"/ui/runs/{run.id}").text
    token = re.search(r'name="token" value="([0-9a-f]+)"', page).group(1)
    cancelled = http.post(f"/ui/runs/{run.id}/cancel", data={"token": token})

    assert forged.status_code == 403
    assert cancelled.status_code == 200 and "cancel" in cancelled.text
    assert Client.http(console.url, api_key=key).get(run.id).wait(timeout=30).status == \
        RunStatus.CANCELLED
    away = httpx.post(f"{console.url}/ui/login",
                      data={"api_key": key, "next": "https://evil.example/"})
    assert away.headers["location"] == "/ui/runs"
