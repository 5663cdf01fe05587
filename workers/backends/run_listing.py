"""Listing runs: newest first, a page at a time, filtered by status, time and labels.

A page is read from an index ordered by ``(created_at, run id)`` (the state store's for a
client's own back end, the gateway store's per tenant), so its cursor, the position of the last
run looked at, pages without gaps or repeats while new runs arrive (they land before the first
page). Filters are applied to each run read; a page reads at most :data:`MAX_SCAN` runs, so a
filter that matches little returns short (even empty) pages with a cursor to go on from, never a
request that reads the whole store.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from genloop.sdk.errors import GenloopError
from genloop.sdk.labels import matches
from genloop.sdk.models import RunInfo, RunPage, RunQuery, RunStatus

#: Runs one page may read to fill itself.
MAX_SCAN = 1000
MAX_PAGE = 200

Row = TypeVar("Row")
#: ``rows(before, n)``: up to ``n`` rows strictly before the cursor position ``before``
#: (``None``: the newest), as ``(created_at, run id, row)``, newest first.
Rows = Callable[[tuple[float, str] | None, int], list[tuple[float, str, Row]]]


class BadCursor(GenloopError):
    """A cursor this listing did not hand out."""


@dataclass(frozen=True)
class RunFilter:
    status: Collection[RunStatus] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    since: float | None = None
    until: float | None = None

    @classmethod
    def of(cls, query: RunQuery) -> RunFilter:
        return cls(status=None if query.status is None else frozenset(query.status),
                   labels=dict(query.labels), since=query.since, until=query.until)

    def admits(self, info: RunInfo) -> bool:
        return ((self.status is None or info.status in self.status)
                and (self.since is None or info.created_at >= self.since)
                and (self.until is None or info.created_at < self.until)
                and matches(info.labels, self.labels))


def encode_cursor(position: tuple[float, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(position)).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        at, run_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(at), str(run_id)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise BadCursor(f"not a cursor of this listing: {cursor[:80]!r}; pass the 'next' of "
                        "the page before") from exc


def list_page(rows: Rows[Row], info: Callable[[Row], RunInfo | None], wanted: RunFilter,
              cursor: str | None, limit: int) -> RunPage:
    """One page of at most ``limit`` runs that ``wanted`` admits, after ``cursor``.

    ``info(row)`` is the run's RunInfo (``None``: gone, left out)."""
    position = decode_cursor(cursor) if cursor else None
    if position is None and wanted.until is not None:
        position = (wanted.until, "")  # nothing newer can match: start there
    found: list[RunInfo] = []
    scanned = 0
    while scanned < MAX_SCAN:
        batch = rows(position, min(max(limit, 50), MAX_SCAN - scanned))
        for at, run_id, row in batch:
            scanned += 1
            position = (at, run_id)
            if wanted.since is not None and at < wanted.since:
                return RunPage(runs=found)  # older than the range: nothing more matches
            run = info(row)
            if run is not None and wanted.admits(run):
                found.append(run)
                if len(found) == limit:
                    return RunPage(runs=found, next=encode_cursor(position))
        if not batch:
            return RunPage(runs=found)
    return RunPage(runs=found, next=encode_cursor(position) if position else None)
