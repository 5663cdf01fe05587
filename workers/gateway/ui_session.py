"""The console's sign-in: the tenant's API key, entered once, kept in a session cookie.

The cookie holds the key itself (``HttpOnly``, ``SameSite=Strict``, path ``/ui``, no expiry, so
the browser forgets it when its session ends) and every request checks it against the gateway
store, so revoking a key signs its consoles out at once. Images are fetched with the same cookie:
no artifact URL works without it. Forms that change a run (cancel, resume) carry a token derived
from the key, which a page of another origin cannot know (on top of ``SameSite``).
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request, Response

from .errors import ApiProblem

COOKIE = "genloop_console"
PATH = "/ui"


class SignInRequired(Exception):
    """A page was asked for without a valid key: the console answers with the sign-in page."""


def sign_in(response: Response, key: str, secure: bool) -> None:
    response.set_cookie(COOKIE, key, path=PATH, httponly=True, samesite="strict", secure=secure)


def sign_out(response: Response) -> None:
    response.delete_cookie(COOKIE, path=PATH)


def _key(request: Request) -> str | None:
    return request.cookies.get(COOKIE)


def tenant_or_none(request: Request) -> str | None:
    key = _key(request)
    if not key:
        return None
    name = request.app.state.gateway.store.tenant_of(key)
    return None if name is None else str(name)


def page_tenant(request: Request) -> str:
    """The tenant of a page request; :class:`SignInRequired` (the sign-in page) without one."""
    name = tenant_or_none(request)
    if name is None:
        raise SignInRequired()
    return name


def data_tenant(request: Request) -> str:
    """The tenant of a fragment, image or event stream request; 401 without one."""
    name = tenant_or_none(request)
    if name is None:
        raise ApiProblem(401, "unauthorized", "sign in to the console at /ui/login")
    return name


def form_token(request: Request) -> str:
    """The token the console's forms carry: a hash of the signed-in key."""
    key = _key(request) or ""
    return hashlib.sha256(b"genloop-console-form\0" + key.encode()).hexdigest()[:32]


def check_form_token(request: Request, token: str) -> None:
    if not hmac.compare_digest(token.encode(), form_token(request).encode()):
        raise ApiProblem(403, "forbidden", "stale or foreign form: reload the page and try again")
