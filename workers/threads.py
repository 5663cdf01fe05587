"""Threads that fit the machine: how many cores each model call of a worker process may use.

With deferred ops (:mod:`genloop.workers.deferred`) a worker process runs models on exactly two
threads: the engine's batch thread and the score batcher's. Under load both are in a torch call
at once (one loop's round is scored while another's is generated), so each gets half the cores
as torch intra-op threads: ``2 x torch_threads <= cores``. Dramatiq's worker threads and the
completion pool only decide and encode PNGs; they run Python under the GIL, mostly waiting on
the store, and are not counted against the cores. The benchmark behind these defaults is
``benchmarks/loops.py --grid`` (figures in the README).

torch's intra-op thread count is per process, so it is set at the edge, once, by whatever owns
the process's models (:class:`~genloop.workers.resources.Resources`); ``GENLOOP_TORCH_THREADS``
overrides the choice, and ``0`` there leaves torch's own default alone.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

ENV_TORCH_THREADS = "GENLOOP_TORCH_THREADS"
#: Threads of a worker process that run models at the same time (the engine and the scorer).
MODEL_THREADS = 2


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def torch_threads(cores: int | None = None) -> int:
    """torch intra-op threads per model call: the cores shared by the model threads, >= 1."""
    return max(1, (available_cores() if cores is None else cores) // MODEL_THREADS)


def fit_torch_threads(threads: int | None = None) -> int | None:
    """Set torch's intra-op threads for this process and return them: ``threads``, else
    ``GENLOOP_TORCH_THREADS``, else :func:`torch_threads`. ``0`` leaves torch alone (None)."""
    if threads is None:
        env = os.environ.get(ENV_TORCH_THREADS, "").strip()
        threads = int(env) if env else torch_threads()
    if threads < 0:
        raise ValueError(f"torch threads must be >= 0 (0: torch's default), not {threads}")
    if threads == 0:
        return None
    import torch

    if torch.get_num_threads() != threads:
        log.info("torch intra-op threads: %d (of %d cores)", threads, available_cores())
        torch.set_num_threads(threads)
    return threads
