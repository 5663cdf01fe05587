"""An engine of its own for these tests, on the tiny model, with a wide batching window so that
concurrent submissions are merged deterministically."""

from __future__ import annotations

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
