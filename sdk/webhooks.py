"""Signing and verifying webhook deliveries, per the Standard Webhooks specification.

A delivery carries three headers: ``webhook-id`` (the same on every retry of one delivery: use it
to drop duplicates), ``webhook-timestamp`` (unix seconds) and ``webhook-signature`` (``v1,`` and
the base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` under the secret; several, space
separated, while a secret is being rotated). The secret is ``whsec_`` and base64 of random bytes.
Written by hand (about forty lines): the ``standardwebhooks`` package does the same, but the SDK
stays at pydantic and httpx.

A receiver::

    from genloop.sdk.webhooks import verify

    def receive(request):
        verify(request.headers, request.body, secret)   # WebhookVerificationError if forged
        summary = json.loads(request.body)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import GenloopError

SECRET_PREFIX = "whsec_"
#: Seconds a delivery's timestamp may be from now (either way) and still verify: replays of an
#: old delivery are refused.
TOLERANCE = 300


#: What a webhook may report: the run's end (always), a loop pausing for its agent, a round
#: of a loop scored.
WebhookEvent = Literal["run.ended", "refine.requested", "round.finished"]


class WebhookTarget(BaseModel):
    """Where to POST a run's summary when it ends (``Graph(webhook=...)``, ``Loop(webhook=...)``):
    signed with the tenant's webhook secret, retried until the receiver answers 2xx (or 410: stop)
    for up to a day. Only through a gateway, which checks the address."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2000, pattern=r"^https?://",
                     description="an http(s) URL the gateway may reach (no private addresses "
                     "unless the operator allows them)")
    events: list[WebhookEvent] = Field(
        default_factory=lambda: list[WebhookEvent](["run.ended"]), min_length=1, max_length=3,
        description="what to report: 'run.ended' (always), and 'refine.requested' (a loop "
        "waits for its agent), 'round.finished' (a loop's round is scored)")

    @field_validator("events")
    @classmethod
    def _with_the_end(cls, events: list[str]) -> list[str]:
        if "run.ended" not in events or len(set(events)) != len(events):
            raise ValueError("events name each kind once and always include 'run.ended'")
        return events


#: The most a notice's ``data`` may hold, as JSON: a delivery stays small.
MAX_NOTICE_BYTES = 16_000


class WebhookNotice(BaseModel):
    """A delivery of the caller's own, not of one run: a campaign's end (``Client.notify``).
    The gateway signs, retries and records it as it does a run's, once per ``key``: posting the
    same key again is answered with the first notice's delivery, not a second one."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2000, pattern=r"^https?://")
    type: str = Field(pattern=r"^[a-z]+(\.[a-z_]+)+$", max_length=40,
                      description="what it reports, e.g. 'campaign.ended' (the body's 'type')")
    key: str = Field(min_length=1, max_length=200,
                     description="the caller's name of this notice: one delivery per key")
    data: dict[str, object] = Field(
        default_factory=dict, description=f"the body's other fields, at most "
        f"{MAX_NOTICE_BYTES:,} bytes as JSON")

    @field_validator("data")
    @classmethod
    def _small(cls, data: dict[str, object]) -> dict[str, object]:
        size = len(json.dumps(data, default=str))
        if size > MAX_NOTICE_BYTES:
            raise ValueError(f"data is {size:,} bytes as JSON; at most {MAX_NOTICE_BYTES:,}")
        return data


class WebhookVerificationError(GenloopError):
    """A delivery whose headers are missing, stale or not signed with the secret."""


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WebhookVerificationError("the secret is not a webhook secret (whsec_...)") from exc


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of a delivery."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, webhook_id: str, body: bytes,
                   timestamp: int | None = None) -> dict[str, str]:
    """The three headers of a delivery of ``body``, signed now (or at ``timestamp``)."""
    at = int(time.time()) if timestamp is None else timestamp
    return {"webhook-id": webhook_id, "webhook-timestamp": str(at),
            "webhook-signature": sign(secret, webhook_id, at, body)}


def verify(headers: Mapping[str, str], body: bytes, secret: str, *,
           tolerance: float = TOLERANCE, now: float | None = None) -> None:
    """Check that ``body`` came with ``headers`` signed with ``secret`` within ``tolerance``
    seconds of ``now``; :class:`WebhookVerificationError` otherwise. ``headers`` in any case."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        webhook_id = lower["webhook-id"]
        timestamp = int(lower["webhook-timestamp"])
        offered = lower["webhook-signature"].split()
    except (KeyError, ValueError) as exc:
        raise WebhookVerificationError("missing or malformed webhook-id, webhook-timestamp "
                                       "or webhook-signature header") from exc
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        raise WebhookVerificationError(f"webhook-timestamp {timestamp} is more than "
                                       f"{tolerance:g} s from now: a stale or replayed delivery")
    expected = sign(secret, webhook_id, timestamp, body)
    if not any(hmac.compare_digest(expected, sig) for sig in offered):
        raise WebhookVerificationError("no webhook-signature matches the body under this secret")
