"""A real chat-completions server on 127.0.0.1 for the vlm-judge tests, with recorded answers.

It speaks the part of OpenAI's API the judge uses (``POST /v1/chat/completions``) over real
HTTP, so the tests exercise the judge's own client, retries and timeouts. Replies come from a
script (consumed first, one per request) and then from ``answer(seen)``, a function of the
request; every request is recorded with its arrival time, and the most requests ever in flight
at once is kept, so tests can check the rate limit and the concurrency bound.
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image


@dataclass
class Reply:
    """What the server sends back: a JSON body (or raw text), after ``delay`` seconds."""

    body: dict[str, Any] | str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    """One request as the server received it."""

    body: dict[str, Any]
    headers: dict[str, str]
    at: float

    @property
    def question(self) -> str:
        return self.body["messages"][0]["content"][0]["text"]

    @property
    def image(self) -> Image.Image:
        url = self.body["messages"][0]["content"][1]["image_url"]["url"]
        data = base64.b64decode(url.removeprefix("data:image/png;base64,"))
        return Image.open(io.BytesIO(data)).convert("RGB")


def completion(text: str, top: dict[str, float] | None = None, prompt_tokens: int = 120,
               completion_tokens: int = 1) -> dict[str, Any]:
    """A chat completion answering ``text``; ``top`` (token -> probability) adds the first
    token's top log-probabilities, as OpenAI returns them."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length",
                              "message": {"role": "assistant", "content": text}}
    if top is not None:
        choice["logprobs"] = {"content": [{
            "token": text, "logprob": math.log(top.get(text, 1e-6)),
            "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in top.items()],
        }]}
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": "test-vlm",
            "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class ChatServer:
    """Serves until :meth:`stop`; ``url`` is the API root to give the judge."""

    def __init__(self, answer: Callable[[Seen], Reply] | None = None) -> None:
        self.answer = answer or (lambda seen: Reply(completion("Yes")))
        self.script: list[Reply] = []
        self.seen: list[Seen] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def reply_to(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            scripted = self.script.pop(0) if self.script else None
        return scripted or self.answer(seen)

    def done(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's name)
            if self.path != "/v1/chat/completions":
                self._send(Reply({"error": {"message": "not found"}}, status=404))
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = server.reply_to(Seen(body, dict(self.headers), time.monotonic()))
            try:
                time.sleep(reply.delay)
                self._send(reply)
            except OSError:  # the client gave up waiting (the timeout tests)
                pass
            finally:
                server.done()

        def _send(self, reply: Reply) -> None:
            data = (reply.body if isinstance(reply.body, str) else json.dumps(reply.body)).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet: pytest shows the assertions, not an access log."""

    return Handler
