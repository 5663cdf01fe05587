"""Artifacts in a local directory (one host, or a file system shared by the workers)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from genloop.sdk.errors import NotFound, StoreError

from .base import ARTIFACT_KEY, ArtifactStore, StoredArtifact, check_key


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
        path, tmp = self._path(key), None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            if tmp is not None:  # a partial file nothing else would remove: stored() skips it
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise StoreError(f"writing artifact {key!r}: {exc}") from exc

    def _touch(self, key: str) -> bool:
        try:
            os.utime(self._path(key))
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"touching artifact {key!r}: {exc}") from exc

    def stored(self) -> Iterator[StoredArtifact]:
        for shard in os.scandir(self.root):
            if not shard.is_dir():
                continue
            for entry in os.scandir(shard.path):
                if ARTIFACT_KEY.match(entry.name):  # not a writer's .tmp- file
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    yield StoredArtifact(entry.name, st.st_size, st.st_mtime)

    def delete_if_older(self, key: str, cutoff: float) -> bool:
        path = self._path(key)
        try:
            if path.stat().st_mtime >= cutoff:
                return False
            path.unlink()
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"deleting artifact {key!r}: {exc}") from exc
