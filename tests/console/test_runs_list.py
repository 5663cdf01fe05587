"""The console's runs list reads what it shows: a run's status, and the summary the gateway
keeps of an ended run (images, best score), not the run's whole result on every page."""

from __future__ import annotations

import time

import pytest

from genloop.gateway import SqliteGatewayStore
from genloop.gateway.service import Gateway
from genloop.gateway.ui_views import run_rows
from genloop.sdk import Graph, RunStatus


@pytest.fixture
def counted(tmp_path, resources):
    """A gateway over the embedded back end, counting the whole results it reads."""
    from genloop.workers.backends.embedded import EmbeddedBackend

    class ResultsCounted(EmbeddedBackend):
        results = 0

        def result(self, run_id):
            self.results += 1
            return super().result(run_id)

    backend = ResultsCounted(tmp_path / "home", threads=2, resources=resources, lease_ttl=5.0)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    gateway = Gateway(backend, store)
    yield gateway, backend
    gateway.stop()
    backend.close()
    store.close()


def finished(gateway: Gateway, tenant: str, graph: Graph) -> str:
    info, _ = gateway.submit(tenant, graph, None)
    deadline = time.monotonic() + 120
    while not gateway.get(tenant, info.id).status.terminal:
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.05)
    return info.id


def test_a_page_of_ended_runs_reads_their_results_once(counted):
    gateway, backend = counted
    # Given three ended runs of a tenant, one scored
    scored = Graph()
    gen = scored.generate("a red circle", n=2, steps=2, model="tiny", id="gen")
    scored.score(gen, text="a red circle", evaluator="clip", id="score")
    plain = Graph()
    plain.generate("a blue square", n=3, steps=2, model="tiny", id="gen")
    ids = [finished(gateway, "lister", g) for g in (scored, plain, plain.model_copy(deep=True))]
    backend.results = 0

    # When the list is read, then read again, then filtered to a status none of them has
    first, _ = run_rows(gateway, "lister")
    read_first = backend.results
    again, _ = run_rows(gateway, "lister")
    failed, _ = run_rows(gateway, "lister", RunStatus.FAILED)

    # Then the first read summarised each run once, and later pages read no result at all
    assert read_first == 3
    assert backend.results == 3
    assert failed == []
    assert [(r.id, r.status, r.images) for r in again] == [
        (ids[2], "succeeded", 3), (ids[1], "succeeded", 3), (ids[0], "succeeded", 2)]
    assert again == first
    best = backend.result(ids[0]).best
    assert again[2].best_score == best.score and again[0].best_score is None
