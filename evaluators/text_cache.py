"""A small thread-safe LRU of prompt embeddings.

Agents score many candidate batches against the same few prompts, so a prompt is encoded once per
model and reused. Entries are keyed by ``(model identity, text)``: one cache may serve several
models without mixing their vectors. The counters make the saving visible (and testable).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass
class CacheStats:
    """Counts since the cache was made: lookups served from memory, and texts encoded."""

    hits: int = 0
    misses: int = 0


class TextCache(Generic[V]):
    """Least-recently-used map from ``(identity, text)`` to an embedding, at most ``maxsize``
    long."""

    def __init__(self, maxsize: int = 1024) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        self.maxsize = maxsize
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[str, str], V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get_many(
        self, identity: str, texts: Sequence[str], encode: Callable[[list[str]], list[V]]
    ) -> list[V]:
        """Return one value per text, calling ``encode`` once with only the texts not cached.

        ``encode`` runs outside the lock, so two threads missing on the same text may both
        encode it; the results are equal, and blocking every scorer behind one model call would
        cost more than the rare duplicate.
        """
        found: dict[str, V] = {}
        with self._lock:
            for text in texts:
                key = (identity, text)
                if key in self._entries:
                    self._entries.move_to_end(key)
                    found[text] = self._entries[key]
            missing = list(dict.fromkeys(t for t in texts if t not in found))
            self.stats.hits += sum(1 for t in texts if t in found)
            self.stats.misses += len(missing)
        if missing:
            encoded = encode(missing)
            if len(encoded) != len(missing):
                raise RuntimeError(
                    f"encode returned {len(encoded)} values for {len(missing)} texts"
                )
            fresh = dict(zip(missing, encoded, strict=True))
            found.update(fresh)
            with self._lock:
                for text, value in fresh.items():
                    self._entries[(identity, text)] = value
                    self._entries.move_to_end((identity, text))
                while len(self._entries) > self.maxsize:
                    self._entries.popitem(last=False)
        return [found[t] for t in texts]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
