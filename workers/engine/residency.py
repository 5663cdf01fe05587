"""Which pipelines stay resident: an LRU of loaded pipelines within a memory budget.

A pipeline's size is the bytes of its modules' parameters and buffers (what it occupies on its
device, activations aside). Adding one evicts the least recently used pipelines that are not in
use until the total fits; a pipeline in use (pinned by ``ModelRegistry.acquire``) is never
evicted, so the total can exceed the budget for as long as that takes.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

log = logging.getLogger(__name__)


def pipeline_bytes(pipe: Any) -> int:
    """Bytes of the parameters and buffers of every ``torch.nn.Module`` component of ``pipe``."""
    components = getattr(pipe, "components", None) or {"model": pipe}
    total = 0
    for component in components.values():
        if isinstance(component, torch.nn.Module):
            for t in (*component.parameters(), *component.buffers()):
                total += t.numel() * t.element_size()
    return total


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

    @property
    def used(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

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
        """Evict unpinned pipelines, oldest first, until ``nbytes`` more fit; returns names."""
        evicted = []
        with self._lock:
            used = sum(e.nbytes for e in self._entries.values())
            for name in list(self._entries):
                if used + nbytes <= self.budget:
                    break
                if self._entries[name].pins:
                    continue
                used -= self._entries.pop(name).nbytes
                evicted.append(name)
        for name in evicted:
            log.info("evicted model %s to stay within the memory budget", name)
        if evicted and torch.cuda.is_available():
            torch.cuda.empty_cache()
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
            del self._entries[name]
        return True
