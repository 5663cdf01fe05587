"""Specs refused before anything is spent (names the back end does not serve, a variant count
past the cap), and a large campaign's manifest and report written in bounded pieces."""

from __future__ import annotations

import csv
import io
import sqlite3

import pytest

from genloop.campaign import CampaignSpecError, parse_spec, run
from genloop.campaign.manifest import SHARD, read_manifest
from genloop.campaign.report import PAGE
from genloop.campaign.runlog import RunLog
from genloop.campaign.spec import MAX_VARIANTS
from genloop.sdk import Client

SPEC = {
    "name": "names",
    "axes": {"product": ["a red sneaker", "a blue ball"]},
    "template": "{product} on grass",
    "brand": {"palette": ["#ff0000"], "weight": 10},
    "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 2, "steps": 2},
}


@pytest.fixture
def local(tmp_path, resources):
    with Client.local(home=tmp_path / "home", threads=2, resources=resources) as client:
        yield client


def runs_in_store(home) -> int:
    with sqlite3.connect(home / "state.db") as db:
        return db.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_a_misspelt_evaluator_inside_the_brand_composite_submits_nothing(tmp_path, local):
    # Given a brand weight, whose composite hides loop.evaluator from the back end's check,
    # and a misspelt model and refiner beside it
    spec = parse_spec(dict(SPEC, loop=dict(SPEC["loop"], evaluator="clpi", model="tinny",
                                           refiner="no-such-refiner")))
    # When it is run
    with pytest.raises(CampaignSpecError) as info:
        run(spec, local, out=tmp_path / "out")
    # Then every unknown name is listed with its field, and nothing was submitted
    problems = info.value.problems
    assert [p.split(":")[0] for p in problems] == ["loop.model", "loop.evaluator", "loop.refiner"]
    assert "unknown evaluator 'clpi'" in problems[1] and " clip," in problems[1]
    assert runs_in_store(tmp_path / "home") == 0
    assert not (tmp_path / "out/names/runs.jsonl").exists()


def test_a_spec_past_the_variant_cap_is_refused_with_its_count():
    axes = {"product": [f"p{i}" for i in range(1000)], "place": [f"q{i}" for i in range(1000)]}
    with pytest.raises(CampaignSpecError) as info:
        parse_spec(dict(SPEC, axes=axes, template="{product} {place}", budget={"images": 200}))
    assert info.value.problems == [
        f"axes: 1,000 product x 1,000 place make 1,000,000 variants, past the cap of "
        f"{MAX_VARIANTS:,} a campaign; split it into several campaigns"]


def test_a_large_campaign_writes_its_manifest_and_report_in_bounded_pieces(tmp_path, local):
    # Given 1,200 variants of which the budget lets one run
    axes = {"product": [f"product {i}" for i in range(40)],
            "place": [f"place {i}" for i in range(30)]}
    spec = parse_spec(dict(SPEC, name="large", axes=axes, template="{product} at {place}",
                           copy={"axis": "place", "headlines": {p: f"Go {p}"
                                                                for p in axes["place"]}},
                           brand={"palette": ["#ff0000"], "min_compliance": 0.5},
                           budget={"images": 2}))
    # When it runs
    manifest = run(spec, local, out=tmp_path / "out")
    folder = tmp_path / "out/large"
    # Then the variants are in shards of SHARD, manifest.json only names them
    assert manifest.counts()["skipped"] == 1199
    assert manifest.variant_files == ["variants/00000.jsonl", "variants/00001.jsonl"]
    lines = [len((folder / f).read_text().splitlines()) for f in manifest.variant_files]
    assert lines == [SHARD, 1200 - SHARD]
    assert (folder / "manifest.json").stat().st_size < 4000
    assert read_manifest(folder) == manifest
    # and the report is paged, each page linking to every other
    pages = sorted(folder.glob("report*.html"))
    assert len(pages) == -(-1200 // PAGE)
    first = (folder / "report.html").read_text()
    assert first.count('<tr class="') == PAGE
    assert all(f'href="report-{p}.html"' in first for p in range(2, len(pages) + 1))
    # A skipped row says what was planned, without steps nobody budgeted
    assert "steps" not in manifest.variants[1].error
    # and the CSV carries each variant's headline and brand flag
    rows = list(csv.DictReader(io.StringIO((folder / "manifest.csv").read_text())))
    assert len(rows) == 1200
    assert rows[0]["headline"] == "Go place 0"
    assert rows[0]["below_brand_minimum"] in ("True", "False")
    assert len(RunLog(folder / "runs.jsonl").current()) == 1
