"""A webhook receiver on loopback for the tests: records every delivery and answers each with
the next status of its script (then 200), after ``delay`` seconds."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, statuses: list[int] | None = None, delay: float = 0.0) -> None:
        self.statuses = list(statuses or [])
        self.deliveries: list[tuple[dict[str, str], bytes, float]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.deliveries.append((dict(self.headers), body, time.time()))
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, n: int, timeout: float = 30) -> list[tuple[dict[str, str], bytes, float]]:
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < n:
            assert time.monotonic() < deadline, f"{len(self.deliveries)} of {n} deliveries came"
            time.sleep(0.02)
        return list(self.deliveries)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
