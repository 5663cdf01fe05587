"""The sweeper runs the retention pass and the artifact collection on its own: an embedded
runtime whose runs are kept 0.2 s forgets a finished run and collects an image nothing names."""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from genloop.sdk import Client, Graph, NotFound
from genloop.workers import OpRegistry, op
from genloop.workers.metrics.prometheus import metrics
from genloop.workers.middleware import sweeper


class Key(BaseModel):
    artifact: str


def _until(condition, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_finished_run_and_an_unnamed_image_go_without_anyone_asking(tmp_path, monkeypatch):
    monkeypatch.setattr(sweeper, "RETENTION_EVERY", 0.0)
    monkeypatch.setattr(sweeper, "COLLECT_EVERY", 0.0)
    registry = OpRegistry()
    op("draw", output=Key, registry=registry)(
        lambda p, inputs, ctx: Key(artifact=ctx.artifacts.put(b"drawn")))
    g = Graph()
    g.add("draw", id="draw")
    def expired(kind: str) -> float:
        return metrics().registry.get_sample_value("genloop_expired_total", {"kind": kind}) or 0

    runs_before, artifacts_before = expired("runs"), expired("artifacts")
    with Client.local(tmp_path, threads=2, registry=registry, sweep_every=0.1,
                      retention=0.2) as client:
        run = client.submit(g)
        drawn = run.wait(timeout=30).items("draw")[0]["artifact"]
        store = client._backend.runtime.artifacts
        orphan = store.put(b"named by nothing")
        aged = time.time() - 3600
        for key in (drawn, orphan):
            os.utime(store.root / key[:2] / key, (aged, aged))

        def gone() -> bool:
            try:
                client.get(run.id)
            except NotFound:
                return not store.exists(orphan) and not store.exists(drawn)
            return False

        _until(gone, "the run and both images are still there")
    assert expired("runs") >= runs_before + 1 and expired("artifacts") >= artifacts_before + 2
