"""Refuse request bodies over a size, 413, before they are read into memory.

A declared ``Content-Length`` over the cap is refused at once; a chunked body is counted as it
arrives and refused when it crosses the cap. (Recent FastAPI has a ``max_body_size`` option;
this middleware keeps older ones working and answers in the gateway's error shape.)
"""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response


class BodyLimit:
    """``max_bytes`` for every body; ``paths`` gives some ``(method, path)`` their own cap
    (uploads are images, larger than any spec)."""

    def __init__(self, app: ASGIApp, max_bytes: int,
                 paths: dict[tuple[str, str], int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.paths = paths or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.paths.get((scope["method"], scope["path"]), self.max_bytes)
        what = "spec" if cap == self.max_bytes else "file"
        message = f"request body over {cap} bytes; send a smaller {what}"
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            response = error_response(413, "body_too_large", message, {"max_bytes": cap})
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            received = await receive()
            if received["type"] == "http.request":
                seen += len(received.get("body", b""))
                if seen > cap:
                    # Raised inside the app's body read, so the app's handlers answer it (the
                    # message only: never the body that came, which a 413 would echo back)
                    raise HTTPException(413, message)
            return received

        await self.app(scope, counted, send)
