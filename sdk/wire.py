"""The HTTP wire format shared by the gateway and the SDK's HTTP back ends.

One JSON error shape for every non-2xx answer, server-sent events carrying :class:`Event` JSON,
and the rules of what a client may retry. The gateway writes what this module reads, so the two
cannot drift apart.
"""

from __future__ import annotations

import email.utils
import time

import httpx
from pydantic import BaseModel, Field, JsonValue, ValidationError

from .errors import (
    ClientError,
    GenloopError,
    GraphError,
    GraphProblem,
    IdempotencyConflict,
    NotFound,
    RefineConflict,
    TransportError,
)
from .models import Event

#: Header that makes ``POST /v1/runs`` idempotent.
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Statuses worth another try: the gateway or something in front of it was briefly unavailable.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: 429 codes that waiting cannot fix (the run is too large for the tenant's limit).
PERMANENT_429_CODES = frozenset({"candidate_limit", "cost_limit"})


class ApiError(BaseModel):
    """The body of every error answer: ``{"code", "message", "details"}``.

    ``details`` holds what a program needs to act: ``problems`` (each with its ``node_id``) for
    an invalid graph, ``limit`` for a refused run, ``run_id`` for an idempotency conflict.
    """

    code: str = Field(description="stable, machine-readable: invalid_graph, not_found, ...")
    message: str = Field(description="for people; says how to fix the request where it can")
    details: dict[str, JsonValue] = Field(default_factory=dict)


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (it may be a number or an HTTP date), if the server sent it."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # an HTTP date; a malformed one is as good as none
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def error_from_response(response: httpx.Response) -> GenloopError:
    """Translate an error answer into the exception the local back end would have raised.

    The body must have been read (``response.read()`` for a streamed response).
    """
    status = response.status_code
    try:
        body = ApiError.model_validate_json(response.content)
    except ValidationError:
        message = response.text[:500] or response.reason_phrase
        body = ApiError(code=f"http_{status}", message=message)
    if body.code == "invalid_graph":
        problems = body.details.get("problems")
        problems = problems if isinstance(problems, list) else []
        return GraphError([GraphProblem.model_validate(p) for p in problems]
                          or [GraphProblem(node_id=None, message=body.message)])
    if status == 404:
        return NotFound(body.message)
    if body.code == "refine_conflict":
        return RefineConflict(body.message)
    if body.code == "idempotency_conflict":
        run_id = body.details.get("run_id")
        return IdempotencyConflict(run_id if isinstance(run_id, str) else None,
                                   f"{status} {body.code}: {body.message}")
    return ClientError(
        f"{status} {body.code}: {body.message}", status_code=status, code=body.code,
        retry_after=retry_after(response),
    )


def transport_error(exc: httpx.TransportError, request: str) -> TransportError:
    return TransportError(f"{request}: {type(exc).__name__}: {exc}")


def retryable(exc: BaseException) -> bool:
    """Whether a failed call may be sent again (every submit carries an idempotency key)."""
    if isinstance(exc, TransportError):
        return True
    return (
        isinstance(exc, ClientError)
        and exc.status_code in RETRY_STATUSES
        and exc.code not in PERMANENT_429_CODES
    )


class SseDecoder:
    """Server-sent events, one line at a time, to :class:`Event` (their ``data`` is its JSON)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        """The event a blank line completes, else ``None`` (comments and keep-alives too)."""
        if not line:
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return Event.model_validate_json(data)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None


def encode_event(event: Event) -> bytes:
    """One event as an SSE frame; ``id`` lets a client resume with ``Last-Event-ID``."""
    return f"id: {event.id}\nevent: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()

