"""The FastAPI app: ``create_app(backend, store)`` serves any back end to many tenants.

Routes are thin: authenticate, call :class:`~.service.Gateway`, render. Blocking back-end calls
run in FastAPI's thread pool (plain ``def`` routes); the event stream is async and polls the
back end from threads.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Query, Request, Response, Security
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.background import BackgroundTask

from genloop.sdk.backend import Backend
from genloop.sdk.errors import RefineConflict, clip
from genloop.sdk.labels import parse_label
from genloop.sdk.models import RunInfo, RunPage, RunQuery, RunResult, RunSpec, RunStatus
from genloop.sdk.ops import RefineAnswer
from genloop.sdk.schema import SpecSchema
from genloop.sdk.webhooks import WebhookNotice
from genloop.sdk.wire import ApiError
from genloop.workers.artifacts.base import CONTENT_TYPES
from genloop.workers.backends.run_listing import BadCursor
from genloop.workers.backends.store_backend import StoreBackend
from genloop.workers.metrics.prometheus import metrics
from genloop.workers.models.models_config import ModelsConfig
from genloop.workers.pool.pool_status import PoolStatus

from . import errors, ui
from .admission import DEFAULT_MAX_PROMPT_CHARS, default_admission
from .auth import bearer, tenant
from .body_limit import BodyLimit
from .errors import ApiProblem
from .judges import TenantSchemas, backend_served
from .limits import TenantLimits
from .security_headers import SecurityHeaders
from .service import Gateway, backend_ops
from .sse import event_stream
from .store import GatewayStore, WebhookJob
from .uploads import UPLOAD_TYPES, Uploaded, reencoded, upload_ext
from .webhook_addresses import AddressPolicy, Resolver, system_resolver
from .webhooks import BACKOFF

UPLOAD_TYPES_BY_EXT = {ext: media for media, ext in UPLOAD_TYPES.items()}

log = logging.getLogger(__name__)


@dataclass
class GatewaySettings:
    max_body_bytes: int = 1_000_000
    limits: TenantLimits = field(default_factory=TenantLimits)
    #: The operator's models (names beyond the built-ins a spec may use).
    models: ModelsConfig = field(default_factory=ModelsConfig)
    #: Longest string (prompt, label, ...) a spec may hold.
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
    #: Reuse stored results across tenants (a tenant then learns what others asked for).
    share_results: bool = False
    #: Largest image a tenant may upload (POST /v1/artifacts), in bytes.
    max_upload_bytes: int = 8_000_000
    #: Seconds a 429 or 503 asks the client to wait.
    retry_after: int = 1
    sse_poll: float = 0.05
    sse_max_poll: float = 0.5
    sse_keepalive: float = 10.0
    #: Where campaign runs write their folders (out/campaigns), for the console's review pages.
    campaigns: Path | None = None
    #: The operator's token for ``/metrics`` on this port (``Authorization: Bearer``); ``None``
    #: serves no metrics here (every tenant can reach this port; ``genloop serve
    #: --metrics-port`` serves them on an address of the operator's instead).
    metrics_token: str | None = None
    #: Addresses (CIDR) webhooks may go to beyond the public internet, e.g. ``10.1.0.0/16``
    #: for a receiver inside the operator's network; and addresses they may never go to.
    webhook_allow: list[str] = field(default_factory=list)
    webhook_deny: list[str] = field(default_factory=list)
    #: Seconds before a failed delivery's first retry (doubling after each).
    webhook_backoff: float = BACKOFF
    #: How webhook hosts are resolved (tests stub it); ``None``: the system's resolver.
    webhook_resolver: Resolver | None = None


class Health(BaseModel):
    status: str


class WebhookSecret(BaseModel):
    secret: str


Tenant = Annotated[str, Depends(tenant)]
_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ApiError} for code in (401, 404, 413, 422, 429, 503)
}
#: Largest event id a client may resume after (ids are per run and far smaller).
MAX_EVENT_ID = 2**62
_EVENT_ID = re.compile(r"[0-9]{1,30}")


def json_body(content_type: Annotated[str | None, Header()] = None) -> None:
    """415 unless the body is declared JSON (``application/json`` or ``*/*+json``)."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/")
                                            and media.endswith("+json")):
        raise ApiProblem(415, "unsupported_media_type",
                         f"send the spec as JSON with 'Content-Type: application/json', "
                         f"not {media or 'no content type'!r}")


def resume_after(last_event_id: str | None, after: int) -> int:
    """``Last-Event-ID`` wins over ``after``: ASCII digits only, clamped to MAX_EVENT_ID."""
    if last_event_id is None:
        return after
    if not _EVENT_ID.fullmatch(last_event_id.strip()):
        raise ApiProblem(422, "invalid_request",
                         "Last-Event-ID must be an event id (ASCII digits)",
                         details={"problems": [{"loc": ["header", "last-event-id"],
                                                "message": "not an event id"}]})
    return min(int(last_event_id.strip()), MAX_EVENT_ID)


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


Gw = Annotated[Gateway, Depends(_gateway)]


#: Longest long poll (``GET /v1/runs/{id}?wait=``), seconds: well inside proxies' idle limits.
MAX_WAIT_S = 30.0


def create_app(backend: Backend, store: GatewayStore,
               settings: GatewaySettings | None = None) -> FastAPI:
    """The gateway over ``backend``; keys and ownership in ``store``. Closing either is the
    caller's business (``genloop serve`` closes both on shutdown)."""
    settings = settings or GatewaySettings()

    @asynccontextmanager
    async def serving(app: FastAPI) -> AsyncIterator[None]:
        """The janitor (forgetting what the back end's retention deleted) runs while the app
        is served, whatever serves it."""
        app.state.gateway.start_janitor()
        yield
        await asyncio.to_thread(app.state.gateway.stop_janitor)

    app = FastAPI(
        title="genloop gateway", version="1",
        description="Submit generate -> evaluate -> refine graphs and loops, follow their "
                    "events, fetch their images. Errors share one shape: code, message, details.",
        responses=_ERRORS, lifespan=serving,
    )
    ops, queues = backend_ops(backend)
    admission = default_admission(ops, settings.models, settings.max_prompt_chars, queues,
                                  backend_served(backend))
    schemas = TenantSchemas(backend, ops)
    policy = AddressPolicy.of(settings.webhook_allow, settings.webhook_deny,
                              settings.webhook_resolver or system_resolver)
    app.state.gateway = Gateway(backend, store, settings.limits, admission,
                                share_results=settings.share_results, webhook_policy=policy,
                                webhook_backoff=settings.webhook_backoff)
    if store.due_webhooks(float("inf"), 1):  # deliveries left by an earlier process
        app.state.gateway.webhooks.start()
    app.state.settings = settings
    errors.install(app, settings.retry_after)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       paths={("POST", "/v1/artifacts"): settings.max_upload_bytes})
    app.add_middleware(SecurityHeaders)
    ui.install(app)

    @app.get("/healthz", response_model=Health, tags=["ops"])
    def healthz() -> Health:
        """The process is up."""
        return Health(status="ok")

    @app.get("/metrics", tags=["ops"], response_class=Response,
             responses={200: {"content": {"text/plain": {}}}})
    def prometheus_metrics(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Response:
        """This process's metrics in Prometheus' text format (with ``genloop serve --local``,
        its embedded workers' too), for the operator's token only; 404 when the gateway has
        none (``GENLOOP_METRICS_TOKEN``). No run ids or tenants as labels."""
        _operator(credentials, "/metrics")
        return Response(generate_latest(metrics().registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/pool", response_model=PoolStatus, tags=["ops"])
    def pool(
        gateway: Gw,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> PoolStatus:
        """The Redis pool behind this gateway: live workers (queues, models, what each runs
        and holds) and the backlog per queue and per model in seconds of work (see
        ``genloop pool status``); for the operator's metrics token only. 404 on a back end
        that is not a pool (``--local``) or when the gateway has no metrics token."""
        _operator(credentials, "/v1/pool")
        backend = gateway.backend
        status = backend.pool_status() if isinstance(backend, StoreBackend) else None
        if status is None:
            raise ApiProblem(404, "not_found", "this gateway's back end is not a worker pool")
        return status

    def _operator(credentials: HTTPAuthorizationCredentials | None, path: str) -> None:
        """The operator's token, or a 404 (none set for this port) or 401."""
        if settings.metrics_token is None:
            raise ApiProblem(404, "not_found", f"{path} is not served on this port")
        sent = (credentials.credentials if credentials else "").encode()
        if not hmac.compare_digest(sent, settings.metrics_token.encode()):
            raise ApiProblem(401, "unauthorized", f"{path} needs the operator's metrics token",
                             headers={"WWW-Authenticate": "Bearer"})

    @app.get("/readyz", response_model=Health, tags=["ops"])
    def readyz(gateway: Gw) -> Health:
        """The store and the back end (broker and state store) answer."""
        gateway.ping()
        return Health(status="ready")

    @app.post("/v1/runs", response_model=RunInfo, status_code=201, tags=["runs"],
              dependencies=[Depends(json_body)],
              responses={200: {"model": RunInfo, "description": "replayed: same key, same spec"},
                         409: {"model": ApiError}, 415: {"model": ApiError}})
    def submit(
        spec: RunSpec, response: Response, gateway: Gw, who: Tenant,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    ) -> RunInfo:
        """Validate and start a run. The same ``Idempotency-Key`` and spec return the same run
        (200); the same key with another spec is 409."""
        info, created = gateway.submit(who, spec, idempotency_key)
        response.status_code = 201 if created else 200
        response.headers["Location"] = f"/v1/runs/{info.id}"
        return info

    @app.get("/v1/runs", response_model=RunPage, tags=["runs"])
    def list_runs(
        gateway: Gw, who: Tenant,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        status: Annotated[list[RunStatus] | None, Query()] = None,
        label: Annotated[list[str] | None, Query(max_length=300)] = None,
        since: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        until: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    ) -> RunPage:
        """Your runs, newest first, a page at a time: pass a page's ``next`` as ``cursor`` for
        the one after it (no gaps or repeats while new runs arrive). Filters: ``status`` and
        ``label=key=value`` repeat (a run must have every label); ``since``/``until`` are unix
        times. A page may hold fewer than ``limit`` runs with a ``next`` still to follow (a
        page reads at most 1,000 runs); listed runs leave out ``nodes``."""
        try:
            labels = dict(parse_label(text) for text in label or ())
            query = RunQuery(cursor=cursor, limit=limit, status=status, labels=labels,
                             since=since, until=until)
            return gateway.runs(who, query)
        except (ValueError, BadCursor) as exc:
            raise ApiProblem(422, "invalid_request", clip(str(exc), 300), details={
                "problems": [{"loc": ["query"], "message": clip(str(exc), 300)}]}) from exc

    @app.get("/v1/runs/{run_id}", response_model=RunInfo, tags=["runs"])
    async def get_run(run_id: str, gateway: Gw, who: Tenant,
                      wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 0) -> RunInfo:
        """The run's status. With ``wait`` (seconds) the answer comes when the run ends or
        when ``wait`` has passed, whichever is first: a long poll, answered the moment the
        run's end is committed."""
        if wait:
            return await gateway.wait_async(who, run_id, wait)
        return await asyncio.to_thread(gateway.get, who, run_id)

    @app.get("/v1/runs/{run_id}/result", response_model=RunResult, tags=["runs"])
    def get_result(run_id: str, gateway: Gw, who: Tenant) -> RunResult:
        """Outputs and failures so far; complete once the run has ended."""
        return gateway.result(who, run_id)

    @app.put("/v1/runs/{run_id}/pin", response_model=RunInfo, tags=["runs"])
    def pin(run_id: str, gateway: Gw, who: Tenant) -> RunInfo:
        """Keep the run and its results whatever the pool's retention."""
        return gateway.pin(who, run_id, True)

    @app.delete("/v1/runs/{run_id}/pin", response_model=RunInfo, tags=["runs"])
    def unpin(run_id: str, gateway: Gw, who: Tenant) -> RunInfo:
        """Let the run expire by the retention again, counted from its end."""
        return gateway.pin(who, run_id, False)

    @app.post("/v1/runs/{run_id}/cancel", response_model=RunInfo, tags=["runs"])
    def cancel(run_id: str, gateway: Gw, who: Tenant) -> RunInfo:
        return gateway.cancel(who, run_id)

    @app.post("/v1/runs/{run_id}/refine", response_model=RefineAnswer, tags=["runs"],
              responses={409: {"model": ApiError, "description": "not waiting for an answer"}})
    def refine(run_id: str, answer: RefineAnswer, gateway: Gw, who: Tenant) -> RefineAnswer:
        """Answer a paused ``agent`` refine (its ``refine.requested`` event) with the next
        round's requests. Only one answer counts: another is 409 ``refine_conflict``."""
        try:
            return gateway.refine(who, run_id, answer)
        except RefineConflict as exc:
            raise errors.ApiProblem(409, "refine_conflict", str(exc)) from exc

    @app.post("/v1/runs/{run_id}/resume", response_model=RunInfo, tags=["runs"])
    def resume(run_id: str, gateway: Gw, who: Tenant) -> RunInfo:
        """Re-drive a run interrupted by a crash, reusing every stored result."""
        return gateway.resume(who, run_id)

    @app.get("/v1/runs/{run_id}/events", tags=["runs"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "server-sent events, `data` is an Event"}})
    async def events(
        run_id: str, gateway: Gw, who: Tenant,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
        follow: bool = True,
        last_event_id: Annotated[str | None, Header(max_length=30)] = None,
    ) -> StreamingResponse:
        """The run's events after ``after`` (or ``Last-Event-ID``); with ``follow`` the stream
        stays open until the run ends, else it sends one page and closes. A stream closes
        when its key is revoked; a tenant holds at most its ``max_event_streams`` open (429)."""
        after = resume_after(last_event_id, after)
        # Ownership is checked before the stream starts, so a 404 is a real 404.
        await asyncio.to_thread(gateway.events, who, run_id, after, 1)
        key = credentials.credentials if credentials else ""
        slot = await asyncio.to_thread(gateway.open_stream, who)

        async def allowed() -> bool:
            return await asyncio.to_thread(gateway.store.tenant_of, key) == who

        async def fetch(last: int) -> list:
            return await asyncio.to_thread(gateway.events, who, run_id, last, limit)

        async def ended(pause: float) -> bool:
            return (await gateway.wait_async(who, run_id, pause)).status.terminal

        stream = event_stream(
            fetch, ended, after, follow=follow, poll=settings.sse_poll,
            max_poll=settings.sse_max_poll, keepalive=settings.sse_keepalive, allowed=allowed,
        )
        return StreamingResponse(slot.hold(stream), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                                 background=BackgroundTask(slot.release))

    @app.post("/v1/webhooks/secret", response_model=WebhookSecret, status_code=201,
              tags=["webhooks"])
    def webhook_secret(gateway: Gw, who: Tenant) -> WebhookSecret:
        """A new secret for your webhook deliveries (``whsec_...``), replacing any earlier one:
        it is shown only now. Verify deliveries with ``genloop.sdk.webhooks.verify``."""
        return WebhookSecret(secret=gateway.new_webhook_secret(who))

    @app.post("/v1/webhooks", response_model=WebhookJob, status_code=201, tags=["webhooks"])
    def notify(notice: WebhookNotice, gateway: Gw, who: Tenant) -> WebhookJob:
        """Have a delivery of your own made (a campaign's end: ``Client.notify``), signed and
        retried as a run's is, once per ``key``; the job's ``webhook_id`` finds it again."""
        return gateway.notify(who, notice)

    @app.get("/v1/webhooks/{run_id}", response_model=WebhookJob, tags=["webhooks"])
    def webhook(run_id: str, gateway: Gw, who: Tenant) -> WebhookJob:
        """How a run's webhook delivery stands (by run id or ``webhook-id``); each attempt is
        also a ``webhook.attempt`` event of the run."""
        return gateway.webhook(who, run_id)

    @app.post("/v1/webhooks/{run_id}/replay", response_model=WebhookJob, tags=["webhooks"])
    def replay_webhook(run_id: str, gateway: Gw, who: Tenant) -> WebhookJob:
        """Deliver a run's webhook again now, with the same ``webhook-id``."""
        return gateway.replay_webhook(who, run_id)

    @app.get("/v1/schema", response_model=SpecSchema, tags=["specs"])
    def schema(gateway: Gw, who: Tenant) -> SpecSchema:
        """Graph and Loop JSON Schema, ``model``/``evaluator``/``refiner``/``op`` narrowed to
        the names this gateway serves you (judges you can use): constrain an agent's specs
        to it."""
        return schemas.schema(gateway.limits(who).evaluators)

    @app.post("/v1/artifacts", response_model=Uploaded, status_code=201, tags=["artifacts"],
              openapi_extra={"requestBody": {"required": True, "content": {
                  media: {"schema": {"type": "string", "format": "binary"}}
                  for media in UPLOAD_TYPES}}},
              responses={413: {"model": ApiError}, 415: {"model": ApiError}})
    async def upload(
        request: Request, response: Response, gateway: Gw, who: Tenant,
        content_type: Annotated[str | None, Header()] = None,
    ) -> Uploaded:
        """Upload a PNG or JPEG image (the raw bytes, with their ``Content-Type``) to edit
        it: its key may then be a generate node's ``init_image`` or ``mask`` in your graphs,
        and read back at ``/v1/artifacts/{key}``; other tenants cannot see it. The image is
        stored re-encoded, without metadata; uploads have quotas (429 with ``Retry-After``)."""
        ext = upload_ext(content_type)
        await asyncio.to_thread(gateway.count_upload, who)
        data, width, height = await asyncio.to_thread(reencoded, await request.body(), ext)
        key = await asyncio.to_thread(gateway.upload, who, data, ext)
        response.headers["Location"] = f"/v1/artifacts/{key}"
        return Uploaded(key=key, content_type=UPLOAD_TYPES_BY_EXT[ext], bytes=len(data),
                        width=width, height=height)

    @app.get("/v1/artifacts/{key}", tags=["artifacts"], response_class=Response,
             responses={200: {"content": {"image/png": {}}, "description": "the bytes"},
                        304: {"description": "not modified (If-None-Match)"}})
    def artifact(
        key: str, gateway: Gw, who: Tenant,
        if_none_match: Annotated[str | None, Header(max_length=200)] = None,
    ) -> Response:
        """An artifact of one of your runs. Keys name their content, so the ETag never
        changes and the bytes may be cached for good."""
        data = gateway.artifact(who, key)
        etag = f'"{key.split(".")[0]}"'
        headers = {"ETag": etag, "Cache-Control": "private, max-age=31536000, immutable"}
        if if_none_match is not None and etag in [t.strip() for t in if_none_match.split(",")]:
            return Response(status_code=304, headers=headers)
        media = CONTENT_TYPES.get(key.rsplit(".", 1)[-1], "application/octet-stream")
        return Response(data, media_type=media, headers=headers)

    return app
