"""The artifact store seam: content-addressed bytes (PNG images), never in message bodies.

A key is ``<sha256 hex>.<ext>``: the same image stored twice is stored once, and a key names
its content everywhere (local directory, S3, the HTTP gateway's ``/v1/artifacts/{key}``).
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

from genloop.sdk.errors import GenloopError

#: What every artifact key looks like, wherever it is checked (stores, the gateway). ``\Z``, not
#: ``$``: ``$`` also matches before a trailing newline, and a key becomes a path and a URL.
ARTIFACT_KEY = re.compile(r"\A[0-9a-f]{64}\.[a-z0-9]{1,8}\Z")

#: Media type by key extension, for the stores that keep one (S3) and the gateway's answers.
CONTENT_TYPES = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg",
                 "webp": "image/webp", "json": "application/json"}


def content_type(key: str) -> str:
    """The media type of artifact ``key`` (by its extension; octet-stream when unknown)."""
    return CONTENT_TYPES.get(key.rsplit(".", 1)[-1], "application/octet-stream")


def artifact_key(data: bytes, ext: str) -> str:
    return f"{hashlib.sha256(data).hexdigest()}.{ext}"


def check_key(key: str) -> str:
    """Reject anything that is not a well-formed key (keys become paths and URLs)."""
    if not ARTIFACT_KEY.match(key):
        raise GenloopError(f"malformed artifact key {key!r}: expected '<sha256 hex>.<ext>'")
    return key


@dataclass(frozen=True)
class StoredArtifact:
    """One stored object, as the collector sees it."""

    key: str
    size: int
    #: When it was last written or put again (unix time): the collector's grace counts from it.
    written_at: float


class ArtifactStore(ABC):
    """Bytes by content key. Writes are idempotent: putting the same bytes twice is harmless."""

    def put(self, data: bytes, ext: str = "png") -> str:
        """Store ``data`` and return its key. Bytes already stored are marked written now, so
        the collector (``genloop.workers.artifacts.gc``) leaves them its grace period again:
        an op that puts an old image and stores a result naming it moments later never finds
        it collected in between."""
        key = artifact_key(data, ext)
        if not self._touch(key):
            self._write(key, data)
        return key

    @abstractmethod
    def stored(self) -> Iterator[StoredArtifact]:
        """Every stored artifact, in no particular order."""

    @abstractmethod
    def delete_if_older(self, key: str, cutoff: float) -> bool:
        """Remove ``key`` if it was last written before ``cutoff``; whether it went."""

    @abstractmethod
    def _touch(self, key: str) -> bool:
        """Mark ``key`` written now; False if it is not stored."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The bytes under ``key``; ``NotFound`` if absent."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def _write(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key`` atomically (readers never see a partial object)."""
