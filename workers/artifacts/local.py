"""Artifacts in a local directory (one host, or a file system shared by the workers)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from genloop.sdk.errors import NotFound, StoreError

from .base import ArtifactStore, check_key


class LocalArtifactStore(ArtifactStore):
    """Files under ``root/<first two hex digits>/<key>``, written by rename so they are whole."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        check_key(key)
        return self.root / key[:2] / key

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no artifact {key!r}") from None
        except OSError as exc:
            raise StoreError(f"reading artifact {key!r}: {exc}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            raise StoreError(f"writing artifact {key!r}: {exc}") from exc
