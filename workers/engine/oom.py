"""Out-of-memory safety: split a batch that does not fit, and remember what fits.

On ``torch.OutOfMemoryError`` (CUDA) or ``MemoryError`` (host) the engine releases the failed
attempt, frees the allocator's cache, halves the batch and retries each half, down to one
candidate; a single candidate that still does not fit fails its request. :class:`OomGuard`
remembers, per (model, width, height), the largest batch that ran after an OOM, and caps later
batches of that shape to it.

A sticky CUDA error (an illegal address, a device-side assert) is different: the context is
dead and every later call in this process would fail, so the batch fails with
:class:`CudaContextLost` (Transient: retried on another worker) and the process is asked to end.

``inject`` is the test hook: a callable ``(key, batch_size) -> bool`` consulted at the first
denoising step of every batched call; when it returns True the call raises
:class:`SimulatedOutOfMemory`, which the engine treats exactly like a real OOM.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from genloop.sdk.errors import Transient

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
ShapeKey = tuple[str, int, int]


# Messages of CUDA errors after which the context is unusable (cudaErrorIllegalAddress,
# cudaErrorAssert, cudaErrorLaunchFailure, ...): every later CUDA call fails the same way.
_STICKY_CUDA_ERRORS = (
    "illegal memory access", "device-side assert", "unspecified launch failure",
    "misaligned address", "illegal instruction", "uncorrectable ECC",
)


class SimulatedOutOfMemory(torch.OutOfMemoryError):
    """Raised by :attr:`OomGuard.inject`; handled like a CUDA out-of-memory error."""


class CudaContextLost(Transient):
    """The process's CUDA context died (a sticky error): the batch fails as Transient, so its
    work is retried elsewhere, and :attr:`OomGuard.on_context_lost` ends this process."""


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError))


class OomGuard:
    """Largest batch that fits, per (model, width, height), learned from OOMs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._oom_at: dict[ShapeKey, int] = {}
        self._fit: dict[ShapeKey, int] = {}
        self.inject: Callable[[ShapeKey, int], bool] | None = None
        #: Called once the CUDA context is lost; the default ends the process (tests replace it).
        self.on_context_lost: Callable[[BaseException], None] = end_process

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
        """``run(items)``, halving ``items`` and retrying each half on OOM; results in order.

        The halves run only after the failed attempt is released: retrying inside the
        ``except`` block (or recursing from it) would keep the exception's traceback, and with
        it every frame of the failed call and the activations they hold, alive while the halves
        run, so the halves would OOM too and the learned cap would come out too small.
        """
        results: list[R] = []
        todo: list[Sequence[T]] = [items]
        while todo:
            chunk = todo.pop()
            failed = False
            try:
                out = run(chunk)
            except Exception as exc:
                if is_cuda_context_lost(exc):
                    self.on_context_lost(exc)
                    raise CudaContextLost(f"the CUDA context is lost: {exc}") from exc
                if not is_oom(exc) or len(chunk) == 1:
                    raise
                failed = True
            if not failed:
                self.record_fit(key, len(chunk))
                results += out
                continue
            # Out of the except block: the failed attempt's frames are gone now (cycles aside).
            self.record_oom(key, len(chunk))
            free_memory()
            half = len(chunk) // 2
            log.warning("out of memory on a batch of %d at %s; retrying as %d + %d",
                        len(chunk), key, half, len(chunk) - half)
            todo += [chunk[half:], chunk[:half]]  # a stack: the first half runs first
        return results


def free_memory() -> None:
    """Collect reference cycles (tracebacks, hooks), then hand cached CUDA blocks back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def is_cuda_context_lost(exc: BaseException) -> bool:
    """A sticky CUDA error: the context is unusable and every later call fails too."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and not is_oom(exc) and any(
        marker in text for marker in _STICKY_CUDA_ERRORS)


def end_process(exc: BaseException) -> None:
    """Ask this process to shut down (SIGTERM: the worker stops gracefully, its unfinished
    messages go back to the broker, and a healthy process takes them)."""
    log.critical("CUDA context lost; ending this worker process so its work is re-sent: %s", exc)
    os.kill(os.getpid(), signal.SIGTERM)
