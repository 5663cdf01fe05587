"""Helpers the engine tests share (a module of its own: test modules cannot import from a
conftest reliably when several folders have one)."""

from __future__ import annotations

import threading

import numpy as np


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
