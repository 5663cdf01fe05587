"""Paging a Redis sorted set of ids scored by time, newest first, by a ``(score, id)`` cursor.

Members of one score come back in reverse lexical order, which makes ``(score, id)`` descending
a total order; a page starts strictly after the cursor's position, so paging has no gaps or
repeats however many members share a score, and new members (newer scores) never shift a page.
"""

from __future__ import annotations

from typing import Any

from .redis_text import scored

#: Members read per round trip beyond the page, to step over those of the cursor's own score.
_SLACK = 16


def members_before(client: Any, key: str, before: tuple[float, str] | None,
                   limit: int) -> list[tuple[str, float]]:
    """Up to ``limit`` ``(member, score)`` of ``key`` strictly before ``before``, newest first."""
    top: float | str = "+inf" if before is None else before[0]
    found: list[tuple[str, float]] = []
    offset = 0
    while len(found) < limit:
        batch = client.zrevrangebyscore(key, top, "-inf", start=offset, num=limit + _SLACK,
                                        withscores=True)
        offset += len(batch)
        for member, score in scored(batch):
            if before is None or score < before[0] or member < before[1]:
                found.append((member, score))
        if len(batch) < limit + _SLACK:
            break
    return found[:limit]
