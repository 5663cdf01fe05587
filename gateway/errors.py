"""Every error answer in one shape, :class:`~genloop.sdk.wire.ApiError`, with a stable code.

genloop's own errors map to statuses here, once: an invalid graph is 422 with each problem's
node id, a missing (or another tenant's) run is 404, an idempotency conflict 409, a limit 429
with ``Retry-After``, a store outage 503. Anything unexpected is 500 ``internal``, logged with
its traceback and never shown to the caller. A caller's value that an answer quotes (a run id
from the path, a Content-Type, an unknown field's name) is cut to
:data:`~genloop.sdk.errors.MAX_QUOTE` characters, so an error never echoes a long input back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from genloop.sdk.errors import (
    ClientError,
    GenloopError,
    GraphError,
    NotFound,
    StoreError,
    clip,
    clip_quotes,
)
from genloop.sdk.wire import ApiError

from .limits import LimitExceeded
from .service import KeyConflict

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
    406: "not_acceptable", 413: "body_too_large", 415: "unsupported_media_type",
}


class ApiProblem(Exception):
    """Raised by routes to answer with an error of their choosing."""

    def __init__(self, status: int, code: str, message: str, *,
                 details: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details = dict(details or {})
        self.headers = dict(headers or {})


def error_response(status: int, code: str, message: str, details: Mapping[str, Any] | None = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = ApiError(code=code, message=clip_quotes(message), details=dict(details or {}))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def to_problem(exc: BaseException, retry_after: int = 1) -> ApiProblem:
    """The answer for an exception raised while serving a request."""
    if isinstance(exc, ApiProblem):
        return exc
    if isinstance(exc, GraphError):
        problems = [p.model_dump() for p in exc.problems]
        node_ids = sorted({p.node_id for p in exc.problems if p.node_id})
        return ApiProblem(422, "invalid_graph", str(exc),
                          details={"problems": problems, "node_ids": node_ids})
    if isinstance(exc, NotFound):
        return ApiProblem(404, "not_found", str(exc))
    if isinstance(exc, LimitExceeded):
        wait = retry_after if exc.retry_after is None else max(1, math.ceil(exc.retry_after))
        return ApiProblem(429, exc.code, str(exc),
                          details={"limit": exc.limit, "requested": exc.requested},
                          headers={"Retry-After": str(wait)})
    if isinstance(exc, KeyConflict):
        return ApiProblem(409, "idempotency_conflict", str(exc) + ": use a new Idempotency-Key "
                          "for a different spec", details={"run_id": exc.run_id})
    if isinstance(exc, ClientError) and exc.status_code == 409:
        return ApiProblem(409, exc.code or "conflict", str(exc) + ": use a new Idempotency-Key "
                          "for a different spec")
    if isinstance(exc, StoreError):
        log.warning("store unavailable: %s", exc)
        return ApiProblem(503, "store_unavailable", "the store is unavailable; retry shortly",
                          headers={"Retry-After": str(retry_after)})
    if isinstance(exc, GenloopError):
        return ApiProblem(400, "bad_request", str(exc))
    # Reached only from the catch-all handler; Starlette re-raises after answering, so the
    # server logs the traceback.
    return ApiProblem(500, "internal", "internal error; it has been logged")


def install(app: FastAPI, retry_after: int = 1) -> None:
    """Register the handlers that turn every exception into the one error shape."""

    async def problem(request: Request, exc: Exception) -> JSONResponse:
        p = to_problem(exc, retry_after)
        return error_response(p.status, p.code, p.message, p.details, p.headers)

    async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = [
            {"loc": [clip(str(part)) for part in e.get("loc", ())],
             "message": clip(e.get("msg", ""))}
            for e in exc.errors()
        ]
        return error_response(422, "invalid_request",
                              f"the request is invalid ({len(problems)} problem(s))",
                              {"problems": problems})

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    # Known errors get their own registrations: a handler for ``Exception`` alone would see
    # them too, but Starlette treats that one as the 500 handler and logs a traceback.
    for known in (ApiProblem, GenloopError, LimitExceeded):
        app.add_exception_handler(known, problem)
    app.add_exception_handler(Exception, problem)
