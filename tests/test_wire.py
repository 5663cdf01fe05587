"""``Retry-After`` as the SDK (and the VLM judge's client) reads it."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from genloop.sdk.wire import retry_after


def _response(value: str | None) -> httpx.Response:
    return httpx.Response(429, headers={} if value is None else {"Retry-After": value})


@pytest.mark.parametrize(("value", "seconds"), [("3", 3.0), ("-2", 0.0), (None, None),
                                                ("soon", None), ("Mon, 99 Foo 2026", None)])
def test_seconds_absent_and_malformed_values(value, seconds):
    # A malformed value is as good as none: it must never raise inside a retry loop
    assert retry_after(_response(value)) == seconds


def test_an_http_date_is_the_seconds_until_it():
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after(_response(date)) <= 30
