"""The console's pages without a browser: paging of the runs list, forms that need the page's
token, and the sign-in redirect staying inside the console."""

from __future__ import annotations

import re

import httpx
from server import console_sign_in

from genloop.sdk import Client, Graph, RunStatus


def signed_in(console, key: str) -> httpx.Client:
    http = httpx.Client(base_url=console.url, follow_redirects=True)
    assert console_sign_in(http, key).status_code == 200  # followed to /runs
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
    with httpx.Client(base_url=console.url) as fresh:
        away = console_sign_in(fresh, key, next="https://evil.example/")
    assert away.headers["location"] == "/ui/runs"


def _follow(http: httpx.Client, run_id: str):
    """Read the run's console event stream in a thread; the event is set when it ends."""
    import threading
    import time

    ended = threading.Event()

    def follow() -> None:
        with http.stream("GET", f"/ui/runs/{run_id}/events", timeout=30) as response:
            assert response.status_code == 200
            for _ in response.iter_bytes():
                pass
        ended.set()

    threading.Thread(target=follow, daemon=True).start()
    time.sleep(0.5)
    assert not ended.is_set()  # the run goes on for 30 s: the stream stays open
    return ended


def test_a_session_holds_no_key_and_ends_with_sign_out_or_revocation(console):
    import genloop_test_ops  # noqa: F401

    key = console.key("sessions")
    g = Graph()
    g.add("test-count", id="slow", params={"log": "/dev/null", "sleep": 30})
    run = Client.http(console.url, api_key=key).submit(g)
    http = signed_in(console, key)
    cookie = http.cookies["genloop_console"]
    assert key not in cookie and key not in str(http.cookies)
    # Sign-out ends the session in the store: its open stream closes, and the old cookie,
    # replayed, is nobody's
    streaming = _follow(http, run.id)
    page = http.get("/ui/runs").text
    token = re.search(r'name="token" value="([0-9a-f]+)"', page).group(1)
    assert http.post("/ui/logout", data={"token": "0" * 32}).status_code == 403
    http.post("/ui/logout", data={"token": token})
    assert streaming.wait(10), "the console's stream stayed open after sign-out"
    replay = httpx.get(f"{console.url}/ui/runs", cookies={"genloop_console": cookie})
    assert replay.status_code == 303 and replay.headers["location"].startswith("/ui/login")

    # Revoking the key ends its sessions and closes their open event streams
    again = signed_in(console, key)
    ended = _follow(again, run.id)
    console.store.revoke(key)
    assert ended.wait(10), "the console's stream stayed open after its key was revoked"
    assert again.get(f"/ui/runs/{run.id}/rounds").status_code == 401
    Client.http(console.url, api_key=console.key("sessions")).get(run.id).cancel()


def test_a_cross_site_sign_in_is_refused(console):
    key = console.key("csrf")
    # A form on another site posts the attacker's key: no sign-in token, or a made-up one
    for data in ({"api_key": key}, {"api_key": key, "csrf": "forged"}):
        response = httpx.post(f"{console.url}/ui/login", data=data)
        assert response.status_code == 403 and "genloop_console" not in response.cookies
    # The sign-in page's token works once its cookie comes with it
    with httpx.Client(base_url=console.url) as http:
        assert console_sign_in(http, key).status_code == 303
        assert "genloop_console" in http.cookies
