"""An engine of its own for these tests, on the tiny model, with a wide batching window so that
concurrent submissions are merged deterministically."""

from __future__ import annotations

import threading

import numpy as np
import pytest


@pytest.fixture(scope="module")
def registry():
    from genloop.workers.engine.engine import EngineOptions
    from genloop.workers.engine.registry import ModelRegistry

    reg = ModelRegistry("cpu", engine_options=EngineOptions(window=0.5, max_batch=8))
    yield reg
    reg.engine.close()


@pytest.fixture
def engine(registry):
    eng = registry.engine
    eng.oom.inject = None
    eng.batcher.batches.clear()
    yield eng
    eng.oom.inject = None


def reference(registry, prompts, seeds, settings):
    """Unbatched, uncached: one pipeline call per candidate."""
    from genloop.workers.engine.generate import generate_images

    with registry.acquire("tiny") as pipe:
        return generate_images(pipe, prompts, seeds, settings)


def concurrently(fn, args_list):
    """Run ``fn(*args)`` for each args in threads, all at once; results in order."""
    results: list = [None] * len(args_list)

    def run(i, args):
        results[i] = fn(*args)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def psnr(a, b) -> float:
    """PSNR in dB between two 8-bit images (PIL or arrays); inf when identical."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
