"""Headers every gateway answer carries, whatever route or error produced it.

``X-Content-Type-Options: nosniff`` keeps browsers to the declared media type (an image stays an
image, never an HTML page sniffed from its bytes); ``X-Frame-Options: DENY`` and CSP's
``frame-ancestors 'none'`` keep other sites from framing the console (clickjacking). A pure ASGI
middleware, so streamed answers (server-sent events) pass through unbuffered.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
}


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)
