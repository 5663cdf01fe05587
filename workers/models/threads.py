"""Threads that fit the machine: how many cores each model call of a worker process may use.

With deferred ops (:mod:`genloop.workers.runtime.deferred`) a worker process runs models on exactly
two threads: the engine's batch thread and the score batcher's. Dramatiq's worker threads and the
completion pool only decide and encode PNGs; they run Python under the GIL, mostly waiting on
the store, and are not counted against the cores.

The engine's thread takes every core (:func:`engine_threads`) and the scorer's one
(:data:`SCORER_THREADS`). One loop alternates between them (its round is generated, then
scored): an even split of the cores, which this replaced, left half of them idle through every
generation, and one 3x8 loop ran at 1.0x a script that used them all. Scoring a round is short
next to generating it (30 ms against 550 ms for 8 shapes images). It is also a matter of
OpenMP: every thread that runs torch with more than one intra-op thread keeps a team of its own,
and once the teams of a process hold more threads than there are cores, GNU OpenMP stops
spinning at barriers and sleeps instead, which cost a small model's many short ops 1.7x (two
idle threads with teams of two slowed a third's calls from 0.9 s to 1.5-1.7 s here). One team of
every core, beside threads of one (which keep no team), stays within the cores.

torch's intra-op thread count is per calling thread under OpenMP, so each model thread sets its
own when it starts. The process-wide default (every other thread's torch work) is set at the
edge, once, by whatever owns the process's models
(:class:`~genloop.workers.models.resources.Resources`): one thread. ``GENLOOP_TORCH_THREADS`` pins
every thread to that count instead, and ``0`` there leaves torch's own default alone. The benchmark
behind these defaults is ``benchmarks/loops.py`` (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

ENV_TORCH_THREADS = "GENLOOP_TORCH_THREADS"
#: torch intra-op threads of the score batcher's thread (see the module's text).
SCORER_THREADS = 1


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def engine_threads(cores: int | None = None) -> int:
    """torch intra-op threads of the engine's batch thread: every core."""
    return max(1, available_cores() if cores is None else cores)


def fit_torch_threads(threads: int | None = None) -> int | None:
    """Set torch's intra-op threads for this process and return them: ``threads``, else
    ``GENLOOP_TORCH_THREADS``, else one. ``0`` leaves torch alone (None)."""
    if threads is None:
        env = os.environ.get(ENV_TORCH_THREADS, "").strip()
        threads = int(env) if env else 1
    if threads < 0:
        raise ValueError(f"torch threads must be >= 0 (0: torch's default), not {threads}")
    if threads == 0:
        return None
    import torch

    if torch.get_num_threads() != threads:
        log.info("torch intra-op threads: %d (of %d cores)", threads, available_cores())
        torch.set_num_threads(threads)
    return threads
