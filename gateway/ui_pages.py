"""What every console page module shares: the shipped templates and the page renderer, which
fills in the signed-in tenant and the form token (:mod:`.ui_session`)."""

from __future__ import annotations

from pathlib import Path

from fastapi import Request
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates

from . import ui_session as session

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")


def page(request: Request, name: str, status_code: int = 200, **context: object) -> Response:
    """Template ``name`` rendered for the request's tenant (none when signed out)."""
    context.setdefault("tenant", session.tenant_or_none(request))
    context.setdefault("token", session.form_token(request))
    return templates.TemplateResponse(request, name, context, status_code=status_code)
