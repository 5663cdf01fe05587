"""The console's sign-in: the tenant's API key, entered once, traded for a server-side session.

Signing in checks the key and makes a session in the gateway store (:meth:`GatewayStore.
create_session`); the browser's cookie holds the session's random id, never the key (``HttpOnly``,
``SameSite=Strict``, path ``/ui``, no expiry, so the browser forgets it when its session ends; the
store forgets it after :data:`~.store.SESSION_TTL`). Every request looks the session up, so
signing out, or revoking the key, ends it at once, and open event streams close within a second.
Images are fetched with the same cookie: no artifact URL works without it.

Forms carry tokens a page of another origin cannot know (on top of ``SameSite``): forms that
change something (cancel, resume, sign out, a campaign decision) a hash of the session id; the
sign-in form a random value also set as a cookie on the sign-in page (double submit), so a
cross-site POST cannot sign a browser in to the attacker's tenant (login CSRF).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import Request, Response

from .errors import ApiProblem

COOKIE = "genloop_console"
LOGIN_COOKIE = "genloop_login"
PATH = "/ui"


class SignInRequired(Exception):
    """A page was asked for without a valid session: the console answers with the sign-in
    page."""


def new_login_token() -> str:
    """A new sign-in token, for the form's hidden field and :func:`set_login_token`."""
    return secrets.token_urlsafe(24)


def set_login_token(response: Response, token: str, secure: bool) -> None:
    response.set_cookie(LOGIN_COOKIE, token, path=PATH + "/login", httponly=True,
                        samesite="strict", secure=secure)


def check_login_token(request: Request, token: str) -> None:
    """403 unless the sign-in form's token is the one this browser's sign-in page set."""
    cookie = request.cookies.get(LOGIN_COOKIE, "")
    if not cookie or not hmac.compare_digest(token.encode(), cookie.encode()):
        raise ApiProblem(403, "forbidden", "stale or foreign sign-in form: reload /ui/login "
                         "and sign in again")


def sign_in(request: Request, response: Response, key: str) -> bool:
    """Start a session for ``key`` on ``response``; ``False`` for an unknown or revoked key."""
    session = request.app.state.gateway.store.create_session(key)
    if session is None:
        return False
    secure = request.url.scheme == "https"
    response.set_cookie(COOKIE, session, path=PATH, httponly=True, samesite="strict",
                        secure=secure)
    response.delete_cookie(LOGIN_COOKIE, path=PATH + "/login")
    return True


def sign_out(request: Request, response: Response) -> None:
    """End the session in the store (its streams close) and forget the cookie."""
    if session := _session(request):
        request.app.state.gateway.store.end_session(session)
    response.delete_cookie(COOKIE, path=PATH)


def _session(request: Request) -> str | None:
    return request.cookies.get(COOKIE)


def tenant_or_none(request: Request) -> str | None:
    session = _session(request)
    if not session:
        return None
    name = request.app.state.gateway.store.session_tenant(session)
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
    """The token the console's forms carry: a hash of the session id."""
    session = _session(request) or ""
    return hashlib.sha256(b"genloop-console-form\0" + session.encode()).hexdigest()[:32]


def check_form_token(request: Request, token: str) -> None:
    if not hmac.compare_digest(token.encode(), form_token(request).encode()):
        raise ApiProblem(403, "forbidden", "stale or foreign form: reload the page and try again")
