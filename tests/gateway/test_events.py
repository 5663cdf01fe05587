"""Server-sent events: in order, ending with the run, resumable without gap or duplicate, a page at
a time without follow."""

from __future__ import annotations

import httpx

from genloop.sdk import Graph, RunStatus
from genloop.sdk.wire import SseDecoder


def slow_chain(label: str) -> Graph:
    g = Graph()
    a = g.add("gw-wait", params={"label": label, "sleep": 0.3}, id="a")
    b = g.add("gw-wait", inputs=[a], params={"label": label + "b", "sleep": 0.3}, id="b")
    g.add("gw-image", inputs=[b], params={"label": label}, id="image")
    return g


def read_stream(url: str, key: str, run_id: str, last_event_id: int | None = None,
                **query) -> list:
    headers = {"Authorization": f"Bearer {key}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    decoder, events = SseDecoder(), []
    with httpx.stream("GET", f"{url}/v1/runs/{run_id}/events", headers=headers, params=query,
                      timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if (event := decoder.feed(line)) is not None:
                events.append(event)
    return events


def test_stream_is_in_order_and_ends_with_the_run(stack):
    # Given a running run
    _, key = stack.tenant()
    run = stack.client(key).submit(slow_chain("order"))
    # When a client follows its raw event stream from the start
    events = read_stream(stack.url, key, run.id)
    # Then it gets every stored event once, in id order, and the stream closes after the end
    assert events == stack.backend.events(run.id, after=0, limit=1000)
    assert [e.id for e in events] == sorted({e.id for e in events})
    assert events[-1].type == "run.succeeded"
    assert any(e.type == "progress" for e in events)


def test_last_event_id_resumes_after_that_event(stack):
    _, key = stack.tenant()
    run = stack.client(key).submit(slow_chain("resume"))
    everything = read_stream(stack.url, key, run.id)
    cut = everything[len(everything) // 2].id
    assert read_stream(stack.url, key, run.id, last_event_id=cut) == [
        e for e in everything if e.id > cut
    ]
    # Resuming after the last event of an ended run closes at once, with nothing.
    assert read_stream(stack.url, key, run.id, last_event_id=everything[-1].id) == []


def test_a_page_without_follow_holds_at_most_its_limit(stack):
    _, key = stack.tenant()
    run = stack.client(key).submit(slow_chain("page"))
    everything = read_stream(stack.url, key, run.id)
    assert len(everything) > 3
    page = read_stream(stack.url, key, run.id, follow="false", limit=3)
    assert page == everything[:3]


class CutStreamOnce(httpx.HTTPTransport):
    """Cuts the first event stream after ``frames`` complete events, as a dropped link would."""

    def __init__(self, frames: int) -> None:
        super().__init__()
        self.frames = frames
        self.last_event_ids: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if not request.url.path.endswith("/events") or "follow" in request.url.params:
            return response
        self.last_event_ids.append(request.headers.get("Last-Event-ID"))
        if len(self.last_event_ids) > 1:
            return response
        upstream, frames = response.stream, self.frames

        def cut():
            seen = b""
            for chunk in upstream:
                seen += chunk
                if seen.count(b"\nid: ") + seen.startswith(b"id: ") >= frames + 1:
                    # Pass on exactly the first ``frames`` events, then drop the link.
                    end = 0
                    for _ in range(frames + 1):  # the retry frame, then the events
                        end = seen.index(b"\n\n", end) + 2
                    yield seen[:end]
                    raise httpx.ReadError("connection dropped", request=request)
            yield seen

        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_Stream(cut(), response), request=request)


class _Stream(httpx.SyncByteStream):
    def __init__(self, chunks, response: httpx.Response) -> None:
        self.chunks, self.response = chunks, response

    def __iter__(self):
        yield from self.chunks

    def close(self) -> None:
        self.response.close()


def test_sdk_follow_resumes_after_a_dropped_connection(stack):
    # Given a client whose first event stream drops after 3 events
    _, key = stack.tenant()
    transport = CutStreamOnce(frames=3)
    client = stack.client(key, transport=transport)
    run = client.submit(slow_chain("drop"))
    # When it follows the run's events
    followed = list(run.events())
    # Then it reconnected after the third event and saw every event exactly once
    assert len(transport.last_event_ids) == 2
    assert transport.last_event_ids[1] == str(followed[2].id)
    assert followed == stack.backend.events(run.id, after=0, limit=1000)
    assert followed[-1].type == "run.succeeded"
    assert run.wait(timeout=10).status == RunStatus.SUCCEEDED


def test_event_ids_reveal_nothing_of_other_tenants_runs(stack):
    # Given alice's finished run, and the ids its stream carried
    _, alice = stack.tenant()
    _, bob = stack.tenant()
    first = stack.client(alice).submit(slow_chain("ids-a"))
    first.wait(timeout=60)
    before = [e.id for e in read_stream(stack.url, alice, first.id)]
    # When bob's runs write events meanwhile (the pool was busy with someone else)
    for i in range(3):
        stack.client(bob).submit(slow_chain(f"ids-b{i}")).wait(timeout=60)
    # Then alice's next run counts its own events only, 1, 2, ... as the first did (how many
    # progress events a run writes depends on timing, not on anyone else)
    second = stack.client(alice).submit(slow_chain("ids-a2"))
    events = read_stream(stack.url, alice, second.id)
    assert before == list(range(1, len(before) + 1))
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    # And resuming after any id is still exact
    middle = events[len(events) // 2].id
    resumed = read_stream(stack.url, alice, second.id, last_event_id=middle)
    assert [e.id for e in resumed] == [e.id for e in events if e.id > middle]
