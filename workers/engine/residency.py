"""Which pipelines stay resident: an LRU of loaded pipelines within a memory budget.

A pipeline's size is the bytes of its modules' parameters and buffers in the dtype it will run
in (what it occupies on its device, activations aside). Evicting one really frees it: see
:func:`release`. Adding one evicts the least recently used pipelines that are not in
use until the total fits; a pipeline in use (pinned by ``ModelRegistry.acquire``) is never
evicted, so the total can exceed the budget for as long as that takes. In a pool, pipelines
other workers also hold go first (:attr:`Residency.spare`): evicting a model's only copy in the
pool makes its next request a load somewhere, evicting a copy costs the pool nothing.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)


def pipeline_bytes(pipe: Any, dtype: torch.dtype | None = None) -> int:
    """Bytes of the parameters and buffers of every ``torch.nn.Module`` component of ``pipe``.

    ``dtype``: count floating-point tensors as they will be once cast to it (the registry
    measures a pipeline built in float32 on the CPU before it moves to the GPU in float16;
    counting the float32 bytes would double its share of the budget). A pipeline with no
    weights of its own that stands for one that has (:mod:`.simulated`) says its size in a
    ``resident_bytes`` attribute.
    """
    declared = getattr(pipe, "resident_bytes", None)
    if declared is not None:
        return int(declared)
    components = getattr(pipe, "components", None) or {"model": pipe}
    total = 0
    for component in components.values():
        if isinstance(component, torch.nn.Module):
            for t in (*component.parameters(), *component.buffers()):
                size = t.element_size()
                if dtype is not None and t.is_floating_point():
                    size = dtype.itemsize
                total += t.numel() * size
    return total


def release(entries: list[Resident]) -> None:
    """Free what evicted pipelines held. diffusers' hooks make reference cycles (module ->
    hook registry -> module), so the pipeline dies only at a cycle collection; collect now, then
    hand the allocator's cached blocks back so another model (or process) can use them."""
    entries.clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def default_budget(device: str) -> int:
    """70% of the GPU's memory (the rest is for activations), or half the host's RAM."""
    if device.startswith("cuda"):
        return int(0.7 * torch.cuda.get_device_properties(torch.device(device)).total_memory)
    import os

    return int(0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@dataclass
class Resident:
    pipe: Any
    nbytes: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    pins: int = 0


class Residency:
    """Name -> resident pipeline, least recently used first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[str, Resident] = OrderedDict()
        self._lock = threading.Lock()
        #: Names other workers of a pool hold (they are evicted first); none by default.
        self.spare: Callable[[], set[str]] = set

    @property
    def used(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    def sizes(self) -> dict[str, int]:
        """Resident names and their bytes, least recently used first (for metrics)."""
        with self._lock:
            return {name: e.nbytes for name, e in self._entries.items()}

    def names(self) -> list[str]:
        """Resident names, least recently used first."""
        with self._lock:
            return list(self._entries)

    def get(self, name: str, pin: bool = False) -> Resident | None:
        """The entry for ``name`` (marked most recently used), pinned if ``pin``."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None:
                self._entries.move_to_end(name)
                entry.pins += pin
            return entry

    def unpin(self, entry: Resident) -> None:
        with self._lock:
            entry.pins -= 1

    def make_room(self, nbytes: int) -> list[str]:
        """Evict unpinned pipelines until ``nbytes`` more fit, oldest first of those held
        elsewhere (:attr:`spare`), then oldest first of the rest; returns their names."""
        evicted, dropped = [], []
        spare = self.spare()
        with self._lock:
            used = sum(e.nbytes for e in self._entries.values())
            order = sorted(self._entries, key=lambda name: name not in spare)  # stable: LRU
            for name in order:
                if used + nbytes <= self.budget:
                    break
                if self._entries[name].pins:
                    continue
                dropped.append(self._entries.pop(name))
                used -= dropped[-1].nbytes
                evicted.append(name)
        for name in evicted:
            log.info("evicted model %s to stay within the memory budget", name)
        if dropped:
            release(dropped)
        return evicted

    def add(self, name: str, pipe: Any, nbytes: int) -> Resident:
        entry = Resident(pipe, nbytes)
        with self._lock:
            self._entries[name] = entry
        return entry

    def evict(self, name: str) -> bool:
        """Drop ``name`` unless it is in use; True if it was dropped."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.pins:
                return False
            dropped = [self._entries.pop(name)]
            del entry  # release() must hold the last reference
        release(dropped)
        return True
