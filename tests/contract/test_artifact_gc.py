"""Artifact collection on every artifact store and state store: what nothing kept names goes
after the grace period, what a result or a run spec names stays, and an image put again while
the collector runs is kept. The collector is given its clock, so nothing here waits."""

from __future__ import annotations

import os
import time
import uuid

from genloop.sdk import Graph
from genloop.workers.artifacts import LocalArtifactStore
from genloop.workers.artifacts.gc import collect
from genloop.workers.stores.records import ResultRecord, RunRecord, RunSpecRecord

GRACE = 3600.0


def _result(store, key: str, artifact: str) -> None:
    store.put_result(ResultRecord(key=key, op="generate", items=[{"artifact": artifact}],
                                  created_at=time.time()))


def _run_using(store, artifact: str) -> None:
    """A run whose spec names ``artifact`` (an upload it edits), with nothing computed yet."""
    g = Graph()
    g.add("generate", id="edit", params={"prompt": "a cat", "init_image": artifact})
    spec = g.model_dump(mode="json")
    run_id = uuid.uuid4().hex
    store.create_run(RunRecord(id=run_id, spec_hash="h", created_at=time.time()),
                     RunSpecRecord(spec=spec, graph=spec), [], [])


def test_what_nothing_names_goes_after_the_grace_and_the_rest_stays(store, artifacts):
    made = artifacts.put(b"an image a result names")
    uploaded = artifacts.put(b"an upload a run edits")
    orphan = artifacts.put(b"an image whose result expired")
    _result(store, "k1", made)
    _run_using(store, uploaded)
    later = time.time() + GRACE + 60

    young = collect(store, artifacts, GRACE)
    assert (young.stored, young.young, young.deleted) == (3, 3, 0)

    dry = collect(store, artifacts, GRACE, now=later, dry_run=True)
    assert (dry.deleted, dry.in_use, dry.dry_run) == (1, 2, True)
    assert artifacts.exists(orphan)

    done = collect(store, artifacts, GRACE, now=later)
    assert (done.deleted, done.deleted_bytes) == (1, len(b"an image whose result expired"))
    assert not artifacts.exists(orphan)
    assert artifacts.exists(made) and artifacts.exists(uploaded)


def test_an_image_put_again_while_the_collector_lists_is_kept(store, tmp_path):
    class PutDuringListing(LocalArtifactStore):
        """A worker stores the same image again (its result not stored yet) right after the
        collector listed it as old and unnamed."""

        def stored(self):
            listed = list(super().stored())
            self.put(b"an old image put again")
            return iter(listed)

    artifacts = PutDuringListing(tmp_path / "artifacts")
    key = artifacts.put(b"an old image put again")
    aged = time.time() - 2 * GRACE
    os.utime(artifacts.root / key[:2] / key, (aged, aged))

    report = collect(store, artifacts, GRACE)
    assert report.young == 0 and report.deleted == 0
    assert artifacts.exists(key)


def test_an_image_written_exactly_at_the_cutoff_is_young_and_kept(store, tmp_path):
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    key = artifacts.put(b"an image on the cutoff")
    written = 1_700_000_000.0
    os.utime(artifacts.root / key[:2] / key, (written, written))

    report = collect(store, artifacts, GRACE, now=written + GRACE)
    assert (report.stored, report.young, report.deleted) == (1, 1, 0)
    assert artifacts.exists(key)
