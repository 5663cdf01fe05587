"""Bearer API keys: ``Authorization: Bearer <key>`` names the tenant a request acts for."""

from __future__ import annotations

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .errors import ApiProblem

bearer = HTTPBearer(
    auto_error=False, description="an API key from `genloop keys create --tenant NAME`"
)

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def tenant(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Security(bearer)
) -> str:
    """The caller's tenant; 401 without a key or with an unknown or revoked one."""
    if credentials is None:
        raise ApiProblem(401, "unauthorized",
                         "missing API key: send 'Authorization: Bearer <key>'", headers=_CHALLENGE)
    name = request.app.state.gateway.store.tenant_of(credentials.credentials)
    if name is None:
        raise ApiProblem(401, "unauthorized", "unknown or revoked API key", headers=_CHALLENGE)
    return str(name)
