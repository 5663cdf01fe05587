"""The run console at ``/ui``: server-rendered pages over the gateway's own calls and SSE.

Pages are plain HTML (Jinja2 templates shipped in the package); a little JavaScript
(``static/console.js``, also shipped: nothing is fetched from the internet) follows the run's
event stream and re-fetches the server-rendered fragments that an event changed. It sees what
the tenant's API key sees, through the same :class:`~.service.Gateway` as ``/v1``, so it works
over the embedded and the Redis back ends alike and a tenant never reaches another's runs or
images. Sign-in and forms: :mod:`.ui_session`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.background import BackgroundTask

from genloop.sdk.errors import NotFound
from genloop.sdk.graph import Graph
from genloop.sdk.models import RunStatus
from genloop.workers.artifacts.base import CONTENT_TYPES
from genloop.workers.backends.store_backend import StoreBackend

from . import ui_campaigns
from . import ui_session as session
from .service import Gateway
from .sse import event_stream
from .ui_pages import HERE, page
from .ui_views import dag, round_rows, run_rows

PageTenant = Annotated[str, Depends(session.page_tenant)]
DataTenant = Annotated[str, Depends(session.data_tenant)]


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


Gw = Annotated[Gateway, Depends(_gateway)]


def run_graph(gateway: Gateway, run_id: str) -> Graph | None:
    """The graph a run executes (a loop's compiled one), from the back end's scheduler."""
    backend = gateway.backend
    return (backend.scheduler.topology(run_id).graph if isinstance(backend, StoreBackend)
            else None)


def install(app: FastAPI) -> None:
    """Serve the console on ``app`` (the gateway's)."""
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    app.include_router(router)
    app.include_router(ui_campaigns.router)

    @app.exception_handler(session.SignInRequired)
    async def sign_in_first(request: Request, exc: Exception) -> Response:
        return RedirectResponse(f"/ui/login?next={request.url.path}", status_code=303)


router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/runs", status_code=303)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/ui/runs") -> Response:
    return _login_page(request, next)


def _login_page(request: Request, next: str, error: str | None = None,
                status_code: int = 200) -> Response:
    """The sign-in form, with a fresh sign-in token in its cookie and its hidden field."""
    token = session.new_login_token()
    response = page(request, "login.html", status_code=status_code, next=_local(next),
                     error=error, csrf=token)
    session.set_login_token(response, token, secure=request.url.scheme == "https")
    return response


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, api_key: Annotated[str, Form()], csrf: Annotated[str, Form()] = "",
          next: Annotated[str, Form()] = "/ui/runs") -> Response:
    session.check_login_token(request, csrf)
    response = RedirectResponse(_local(next), status_code=303)
    if not session.sign_in(request, response, api_key.strip()):
        return _login_page(request, next, "unknown or revoked API key", status_code=401)
    return response


@router.post("/logout")
def logout(request: Request, token: Annotated[str, Form()]) -> RedirectResponse:
    session.check_form_token(request, token)
    response = RedirectResponse("/ui/login", status_code=303)
    session.sign_out(request, response)
    return response


def _local(path: str) -> str:
    """Only a path of the console is a place to go after sign-in (no open redirect)."""
    return path if path.startswith("/ui/") and not path.startswith("/ui//") else "/ui/runs"


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, gateway: Gw, who: PageTenant,
              status: Annotated[str | None, Query()] = None,
              before: Annotated[float | None, Query()] = None) -> Response:
    wanted = (RunStatus(status)
              if status is not None and status in RunStatus._value2member_map_ else None)
    rows, next_before = run_rows(gateway, who, wanted, before)
    return page(request, "runs.html", rows=rows, status=wanted.value if wanted else "",
                 statuses=[s.value for s in RunStatus], next_before=next_before,
                 first_page=before is None)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, gateway: Gw, who: PageTenant) -> Response:
    try:
        info = gateway.get(who, run_id)
        result = gateway.result(who, run_id)
    except NotFound:
        return page(request, "missing.html", status_code=404, run_id=run_id)
    graph = run_graph(gateway, run_id)
    webhook = gateway.store.webhook(f"msg_{run_id}")
    attempts = [e for e in gateway.events(who, run_id, 0, 1000) if e.type == "webhook.attempt"
                ] if webhook is not None else []
    return page(request, "run.html", info=info, result=result,
                 dag=dag(graph, info.nodes) if graph is not None else None,
                 rounds=round_rows(result), token=session.form_token(request),
                 webhook=webhook, webhook_attempts=attempts)


@router.get("/runs/{run_id}/rounds", response_class=HTMLResponse)
def rounds_fragment(request: Request, run_id: str, gateway: Gw, who: DataTenant) -> Response:
    """The rounds and the best image: what the run page re-fetches when an event says a
    node ended or an item failed."""
    result = gateway.result(who, run_id)
    return page(request, "_rounds.html", result=result, rounds=round_rows(result))


@router.get("/runs/{run_id}/events")
async def events(request: Request, run_id: str, gateway: Gw, who: DataTenant,
                 after: Annotated[int, Query(ge=0, le=2**62)] = 0) -> StreamingResponse:
    """The run's events as server-sent events, like ``/v1/runs/{id}/events``."""
    settings = request.app.state.settings
    last_id = request.headers.get("last-event-id", "").strip()
    if last_id.isascii() and last_id.isdigit() and len(last_id) <= 18:  # ids fit in 62 bits
        after = int(last_id)
    await asyncio.to_thread(gateway.events, who, run_id, after, 1)  # 404 before the stream
    slot = await asyncio.to_thread(gateway.open_stream, who)

    async def fetch(last: int) -> list:
        return await asyncio.to_thread(gateway.events, who, run_id, last, 500)

    async def ended(pause: float) -> bool:
        return (await gateway.wait_async(who, run_id, pause)).status.terminal

    async def allowed() -> bool:  # signed out, or the key revoked: the stream closes
        return await asyncio.to_thread(session.tenant_or_none, request) == who

    stream = event_stream(fetch, ended, after, poll=settings.sse_poll,
                          max_poll=settings.sse_max_poll, keepalive=settings.sse_keepalive,
                          allowed=allowed)
    return StreamingResponse(slot.hold(stream), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                             background=BackgroundTask(slot.release))


@router.get("/artifacts/{key}")
def artifact(key: str, gateway: Gw, who: DataTenant) -> Response:
    """An image of one of the tenant's runs, with the session's key; never public."""
    data = gateway.artifact(who, key)
    media = CONTENT_TYPES.get(key.rsplit(".", 1)[-1], "application/octet-stream")
    return Response(data, media_type=media, headers={"Cache-Control": "private, max-age=3600"})


@router.post("/runs/{run_id}/cancel")
def cancel(request: Request, run_id: str, gateway: Gw, who: PageTenant,
           token: Annotated[str, Form()]) -> RedirectResponse:
    session.check_form_token(request, token)
    gateway.cancel(who, run_id)
    return RedirectResponse(f"/ui/runs/{run_id}", status_code=303)


@router.post("/runs/{run_id}/resume")
def resume(request: Request, run_id: str, gateway: Gw, who: PageTenant,
           token: Annotated[str, Form()]) -> RedirectResponse:
    session.check_form_token(request, token)
    gateway.resume(who, run_id)
    return RedirectResponse(f"/ui/runs/{run_id}", status_code=303)
