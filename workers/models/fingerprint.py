"""Content identity of weights: one fingerprint for models and evaluators.

A model's or evaluator's identity goes into every result key, so it must depend on what the
weights *are*, not where they sit: two checkouts (or two hosts of one pool) holding the same
files must get the same identity, or they never share results and leases for the same work.
Paths and mtimes therefore never enter the digest; only relative file names and contents do.

Hashing gigabytes on every start would be slow, so each file's digest is cached in this process
by (resolved path, size, mtime): a file that is rewritten in place changes its mtime and is
hashed again, one that is not is hashed once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

from genloop.sdk.errors import Permanent

_cache: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def file_digest(path: Path) -> str:
    """SHA-256 of one file's bytes, cached by (path, size, mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    with _lock:
        _cache[key] = value
    return value


def fingerprint(path: str | Path, *, patterns: Sequence[str] = ("**/*",)) -> str:
    """A short content hash of a weights file, or of a directory's files matching ``patterns``
    (globs relative to it; the default takes every file, recursively).

    Each file enters as its path relative to ``path`` plus its content digest, so renaming or
    moving the whole directory keeps the identity while changing any file changes it.
    """
    root = Path(path)
    if root.is_file():
        files = {root.name: root}
    elif root.is_dir():
        files = {f.relative_to(root).as_posix(): f
                 for p in patterns for f in root.glob(p) if f.is_file()}
    else:
        raise Permanent(f"weights not found at {str(root)!r}")
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{file_digest(files[name])}\0".encode())
    return digest.hexdigest()[:16]
