"""A real uvicorn server on a loopback port, in a thread of the test process."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI


class LiveServer:
    """``with LiveServer(app) as server: server.url`` serves ``app`` on 127.0.0.1:<free port>.
    ``lifespan``: run the app's startup and shutdown (its janitor), as ``genloop serve`` does;
    off by default, as the other tests were written with it off."""

    def __init__(self, app: FastAPI, *, lifespan: bool = False) -> None:
        # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only then, and
        # without it every answer waits ~40 ms on Nagle and the client's delayed ACK.
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on" if lifespan else "off",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True, name=f"uvicorn-{self.port}")

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def console_sign_in(http, key: str, next: str = "/ui/runs"):
    """Sign ``http`` (an ``httpx.Client`` on the server's base URL) in to the console the way a
    browser does: load the sign-in page (its token, in a cookie and the form), post the form."""
    import re

    page = http.get("/ui/login", params={"next": next})
    token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    return http.post("/ui/login", data={"api_key": key, "next": next, "csrf": token})
