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
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _message(self) -> str:
        return f"request body over {self.max_bytes} bytes; send a smaller spec"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response = error_response(413, "body_too_large", self._message(),
                                      {"max_bytes": self.max_bytes})
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # Raised inside the app's body read, so the app's handlers answer it.
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, counted, send)
