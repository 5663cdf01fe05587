"""The genloop exception hierarchy.

Every error genloop raises derives from :class:`GenloopError`::

    GenloopError
    ├── GraphError            an invalid Graph or Loop; lists every problem at once
    ├── OpError               raised by op bodies, classifies retry behaviour
    │   ├── Permanent         never retried (bad params, unknown model, unreadable input)
    │   ├── Transient         retried up to the node's policy
    │   └── Cancelled         the run was cancelled while the op ran
    ├── RunError              a run or one of its nodes did not produce what was asked
    │   ├── QuorumError       fewer successful input items than a node's ``min_success``
    │   └── RunTimeout        ``Run.wait`` gave up before the run ended (also a TimeoutError)
    ├── NotFound              no run / artifact with that id (for this tenant)
    ├── StoreError            the state or artifact store failed underneath
    └── ClientError           the SDK could not talk to its back end
        ├── TransportError    connection failures, retried by the HTTP client
        ├── IdempotencyConflict  the idempotency key names a run of another spec (HTTP 409)
        └── RefineConflict    a refine answer came when none was awaited (HTTP 409)

Errors from lower libraries (sqlite3, redis, httpx, torch) are translated into these where they
enter genloop, so callers only ever catch genloop's own types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

#: Most characters of a caller's value an error quotes: a 100,000-character prompt sent back in
#: full would cost an agent ~12,000 tokens to read and tell it nothing more.
MAX_QUOTE = 200
_LONG = MAX_QUOTE + 1
# A quoted value as repr() writes it: a quote of the other kind, or an escaped one, inside.
_LONG_QUOTES = re.compile(rf"'((?:[^'\\\n]|\\.){{{_LONG},}})'"
                          rf"|\"((?:[^\"\\\n]|\\.){{{_LONG},}})\"")


def clip(text: str, limit: int = MAX_QUOTE) -> str:
    """``text``, or its first ``limit`` characters and how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def clip_quotes(message: str) -> str:
    """``message`` with every quoted value longer than :data:`MAX_QUOTE` cut to it."""
    def cut(match: re.Match[str]) -> str:
        mark = match.group(0)[0]
        return mark + clip(match.group(1) or match.group(2)) + mark

    return _LONG_QUOTES.sub(cut, message)


class GenloopError(Exception):
    """Root of every error genloop raises."""


class GraphProblem(BaseModel):
    """One problem found while validating a spec, written so its author (often a model) can fix
    it: where (``path``, a JSON path into the submitted spec), what was received, what is
    allowed (the names this back end serves, or the constraint broken)."""

    node_id: str | None
    message: str
    path: str | None = Field(default=None, description="JSON path of the offending value, e.g. "
                             "'nodes[1].params.model' or 'evaluator'")
    received: Any = Field(default=None, description="the value found there (JSON; a long one "
                          f"cut to {MAX_QUOTE} characters)")
    allowed: Any = Field(default=None, description="the names, or the constraint, allowed "
                         "there (JSON)")

    @field_validator("message")
    @classmethod
    def _short_message(cls, message: str) -> str:
        return clip_quotes(message)

    @field_validator("received")
    @classmethod
    def _short_received(cls, value: Any) -> Any:
        if isinstance(value, str):
            return clip(value)
        if isinstance(value, list | dict):
            text = json.dumps(value, default=str)
            return value if len(text) <= MAX_QUOTE else clip(text)
        return value

    def __str__(self) -> str:
        where = self.path or (f"node {self.node_id!r}" if self.node_id else "graph")
        text = f"{where}: {self.message}"
        # A name check says the name (quoted) in its message, and a gateway's the names
        # allowed too (for agents that read only messages): each is said once
        quoted = isinstance(self.received, str) and repr(self.received) in self.message
        if self.received is not None and not quoted:
            text += f" (received {self.received!r})"
        if (self.allowed is not None and "; allowed: " not in self.message
                and str(self.allowed) not in self.message):  # pydantic's own says the choices
            text += f"; allowed: {self.allowed}"
        return text


class GraphError(GenloopError, ValueError):
    """The graph is invalid; ``problems`` holds every problem found, not only the first."""

    def __init__(self, problems: Sequence[GraphProblem]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid graph ({len(self.problems)} problem(s)):\n{lines}")


class OpError(GenloopError):
    """Base of the errors an op body raises to say how its failure should be treated."""


class Permanent(OpError):
    """A failure that will not go away on retry: the node fails at once."""


class Transient(OpError):
    """A failure worth retrying (a busy device, a flaky I/O): retried up to the node's policy."""


class Cancelled(OpError):
    """The run was cancelled while the op was running; the op stopped early."""


class RunError(GenloopError):
    """A run, or a node of it, did not produce what was asked."""


class QuorumError(RunError):
    """Fewer input items succeeded than the node's ``min_success`` asks for."""


class RunTimeout(RunError, TimeoutError):
    """``Run.wait`` timed out; the run itself goes on."""


class NotFound(GenloopError, LookupError):
    """No run or artifact with that id is visible to the caller."""


class StoreError(GenloopError):
    """The state store or artifact store failed underneath."""


class ClientError(GenloopError):
    """The SDK could not complete a call against its back end."""

    def __init__(
        self, message: str, *, status_code: int | None = None, code: str | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        #: Seconds the server asked the caller to wait (HTTP ``Retry-After``), if it said.
        self.retry_after = retry_after


class TransportError(ClientError):
    """The back end could not be reached (connection refused, reset, timed out)."""


class IdempotencyConflict(ClientError):
    """The idempotency key was already used for a different spec: use a new key for it.

    Raised by the state stores where they find the key, and by the HTTP client for a gateway's
    409 ``idempotency_conflict``; ``run_id`` is the run that holds the key, when known."""

    def __init__(self, run_id: str | None, message: str | None = None) -> None:
        super().__init__(
            message or f"idempotency key already used by run {run_id} with another spec",
            status_code=409, code="idempotency_conflict",
        )
        self.run_id = run_id


class RefineConflict(ClientError):
    """A refine answer that cannot count: the node already has one, timed out, or is not
    waiting for one."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=409, code="refine_conflict")
