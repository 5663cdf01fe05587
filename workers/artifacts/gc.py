"""Artifact collection: images that nothing kept names any more are deleted after a grace period.

Mark and sweep, written here because no library knows genloop's references: list the stored
artifacts, then read every stored result and run spec (:meth:`StateStore.reference_docs`) for
the keys they name; an artifact named by none and last written more than ``grace`` ago goes.
Results name what runs made (and what refine's requests edit); specs name what tenants
uploaded and submitted. So an artifact lives as long as a kept run or result names it (see
:mod:`..stores.retention`), and an upload no run used lives ``grace`` (by default the retention).

Safe against work in flight: the listing comes first, so an artifact written after it is no
candidate; an op that puts an image already stored marks it written again
(:meth:`ArtifactStore.put`), and each deletion checks the age once more
(:meth:`ArtifactStore.delete_if_older`), so an image put while the collector marked is kept.
An artifact stored by a worker whose result is not stored yet is younger than the grace.
"""

from __future__ import annotations

import logging
import re
import time

from pydantic import BaseModel

from ..stores.base import StateStore
from .base import ArtifactStore

logger = logging.getLogger(__name__)

#: An artifact key as it appears in stored JSON: a whole string value.
_KEY_IN_JSON = re.compile(r'"([0-9a-f]{64}\.[a-z0-9]{1,8})"')


class Collected(BaseModel):
    """What a collection found and did (``dry_run``: what it would have deleted)."""

    stored: int
    stored_bytes: int
    in_use: int
    young: int
    deleted: int
    deleted_bytes: int
    dry_run: bool


def keys_in_use(state: StateStore) -> set[str]:
    """Every artifact key a stored result or run spec names."""
    found: set[str] = set()
    for doc in state.reference_docs():
        found.update(_KEY_IN_JSON.findall(doc))
    return found


def collect(state: StateStore, artifacts: ArtifactStore, grace: float, *,
            now: float | None = None, dry_run: bool = False) -> Collected:
    """Delete (or with ``dry_run`` count) the artifacts nothing names that were last written
    more than ``grace`` seconds before ``now``."""
    cutoff = (time.time() if now is None else now) - grace
    listed = list(artifacts.stored())
    old = [a for a in listed if a.written_at < cutoff]
    used = keys_in_use(state)
    doomed = [a for a in old if a.key not in used]
    deleted = doomed if dry_run else [a for a in doomed if artifacts.delete_if_older(a.key, cutoff)]
    report = Collected(
        stored=len(listed), stored_bytes=sum(a.size for a in listed),
        in_use=sum(1 for a in listed if a.key in used), young=len(listed) - len(old),
        deleted=len(deleted), deleted_bytes=sum(a.size for a in deleted), dry_run=dry_run)
    if deleted and not dry_run:
        logger.info("artifacts: %d deleted (%d bytes), %d kept", report.deleted,
                    report.deleted_bytes, report.stored - report.deleted)
    return report
