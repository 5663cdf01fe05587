"""Out-of-memory safety: split a batch that does not fit, and remember what fits.

On ``torch.OutOfMemoryError`` (CUDA) or ``MemoryError`` (host) the engine frees the allocator's
cache, halves the batch and retries each half, down to one candidate; a single candidate that
still does not fit fails its request. :class:`OomGuard` remembers, per (model, width, height),
the largest batch that ran after an OOM, and caps later batches of that shape to it.

``inject`` is the test hook: a callable ``(key, batch_size) -> bool`` consulted at the first
denoising step of every batched call; when it returns True the call raises
:class:`SimulatedOutOfMemory`, which the engine treats exactly like a real OOM.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
ShapeKey = tuple[str, int, int]


class SimulatedOutOfMemory(torch.OutOfMemoryError):
    """Raised by :attr:`OomGuard.inject`; handled like a CUDA out-of-memory error."""


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError))


class OomGuard:
    """Largest batch that fits, per (model, width, height), learned from OOMs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._oom_at: dict[ShapeKey, int] = {}
        self._fit: dict[ShapeKey, int] = {}
        self.inject: Callable[[ShapeKey, int], bool] | None = None

    def limit(self, key: ShapeKey) -> int | None:
        """The batch cap for ``key``, or ``None`` while no OOM has been seen for it."""
        with self._lock:
            oom = self._oom_at.get(key)
            if oom is None:
                return None
            fit = self._fit.get(key, 0)
            return fit if fit else max(1, oom // 2)

    def record_fit(self, key: ShapeKey, size: int) -> None:
        with self._lock:
            if size < self._oom_at.get(key, size + 1):
                self._fit[key] = max(self._fit.get(key, 0), size)

    def record_oom(self, key: ShapeKey, size: int) -> None:
        with self._lock:
            self._oom_at[key] = min(self._oom_at.get(key, size), size)
            if self._fit.get(key, 0) >= size:  # memory got tighter: re-learn from the halves
                self._fit.pop(key)

    def check_injected(self, key: ShapeKey, size: int) -> None:
        if self.inject is not None and self.inject(key, size):
            raise SimulatedOutOfMemory(f"simulated out of memory: batch of {size} at {key}")

    def run_split(self, key: ShapeKey, items: Sequence[T],
                  run: Callable[[Sequence[T]], list[R]]) -> list[R]:
        """``run(items)``, halving ``items`` and retrying each half on OOM; results in order."""
        try:
            out = run(items)
        except Exception as exc:
            if not is_oom(exc) or len(items) == 1:
                raise
            self.record_oom(key, len(items))
            _free_cached_memory()
            half = len(items) // 2
            log.warning("out of memory on a batch of %d at %s; retrying as %d + %d",
                        len(items), key, half, len(items) - half)
            return (self.run_split(key, items[:half], run)
                    + self.run_split(key, items[half:], run))
        self.record_fit(key, len(items))
        return out


def _free_cached_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
