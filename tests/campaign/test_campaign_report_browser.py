"""The campaign report in a real browser: every image loads, rows match the manifest, filters
work, and it needs no server (opened from the file system)."""

from __future__ import annotations

import re

import pytest
from browser import browser_page

from genloop.campaign import parse_spec, run
from genloop.campaign.manifest import read_manifest
from genloop.campaign.report import write_report
from genloop.sdk import Client

SPEC = {
    "name": "browser",
    "axes": {"product": ["a red sneaker", "a blue ball"], "scene": ["on grass", "on sand"],
             "audience": ["runners"]},
    "template": "{product} {scene}, for {audience}",
    "copy": {"axis": "product", "headlines": {"a red sneaker": "Run far.",
                                              "a blue ball": "Play on."}},
    "formats": [{"name": "1:1", "width": 64, "height": 64},
                {"name": "1.91:1", "width": 96, "height": 50}],
    "brand": {"palette": ["#ff0000"], "min_compliance": 0.3},
    "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 1, "steps": 2},
    "budget": {"images": 3},
}


@pytest.mark.slow
def test_the_report_shows_every_variant_and_filters_by_axis(tmp_path, resources):
    with Client.local(home=tmp_path / "home", threads=2, resources=resources) as client:
        manifest = run(parse_spec(SPEC), client, out=tmp_path / "out")
    folder = tmp_path / "out" / "browser"
    expected = read_manifest(folder).model_dump(mode="json")["variants"]
    with browser_page() as page:
        page.goto((folder / "report.html").as_uri())
        page.wait_for_load_state("load")
        keys = page.eval_on_selector_all("tbody tr", "rows => rows.map(r => r.dataset.key)")
        assert keys == [v["key"] for v in expected]
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == 2 * 3 and all(w > 0 for w in widths)  # 3 made, 1 over budget
        assert page.inner_text("#shown") == "4"
        page.select_option("select[aria-label='filter by product']", "a blue ball")
        visible = page.eval_on_selector_all(
            "tbody tr", "rows => rows.filter(r => !r.hidden).map(r => r.dataset.key)")
        assert visible == [v["key"] for v in expected if v["values"]["product"] == "a blue ball"]
        page.select_option("select[aria-label='filter by status']", "skipped")
        assert page.inner_text("#shown") == "1"
        page.screenshot(path=str(folder / "report.png"), full_page=True)
        # The review findings: previews open full size, rows sort by score, filter by
        # finalist and brand minimum, show the flag and the cost, and the sheets are linked.
        # (The tiny model's colours are its own: one variant is made a finalist that met the
        # minimum, so the filters have both kinds to tell apart.)
        edited = read_manifest(folder)
        edited.variants[0].below_brand_minimum, edited.variants[0].finalist = False, True
        edited.variants[1].below_brand_minimum, edited.variants[1].finalist = True, False
        write_report(edited, folder)
        expected = edited.model_dump(mode="json")["variants"]
        page.reload()
        links = page.eval_on_selector_all(
            "figure a", "as => as.map(a => [a.getAttribute('href'), a.querySelector('img')"
            ".getAttribute('src')])")
        assert len(links) == 6 and all(href == src for href, src in links)
        page.select_option("#sort", "score")
        scores = page.eval_on_selector_all("tbody tr", "rows => rows.map(r => r.dataset.score)")
        made = [float(x) for x in scores if x]
        assert made == sorted(made, reverse=True) and scores[-1] == ""  # the skipped one last
        page.select_option("select[aria-label='filter by finalist']", "yes")
        shown = page.eval_on_selector_all(
            "tbody tr", "rows => rows.filter(r => !r.hidden).map(r => r.dataset.key)")
        assert shown == [expected[0]["key"]]
        page.select_option("select[aria-label='filter by finalist']", "")
        page.select_option("select[aria-label='filter by brand minimum']", "below")
        below = page.eval_on_selector_all(
            "tbody tr", "rows => rows.filter(r => !r.hidden).map(r => r.innerText)")
        assert len(below) == sum(1 for v in expected if v["below_brand_minimum"]) > 0
        assert all("below brand minimum" in text for text in below)
        costs = page.eval_on_selector_all(
            "tbody tr", "rows => rows.map(r => r.cells[r.cells.length - 2].innerText)")
        by_key = {v["key"]: v for v in expected}
        keys = page.eval_on_selector_all("tbody tr", "rows => rows.map(r => r.dataset.key)")
        assert {(by_key[k]["status"], c) for k, c in zip(keys, costs, strict=True)} == {
            ("succeeded", "1 image, 2 steps"), ("skipped", "")}
        # The brand figure says what it measures: the subject's share in brand colours.
        assert "the share of the subject's pixels (the background left out)" in \
            page.inner_text("body")
        brands = page.eval_on_selector_all(
            "tbody tr", "rows => rows.map(r => r.cells[r.cells.length - 3].innerText)")
        assert sum(bool(re.fullmatch(r"\d+% of \d+% subject", b)) for b in brands) == 3
        sheets = page.eval_on_selector_all("nav[aria-label='contact sheets'] a",
                                           "as => as.map(a => a.getAttribute('href'))")
        assert sheets and sorted(sheets) == sorted(read_manifest(folder).sheets)
        assert all((folder / sheet).is_file() for sheet in sheets)
    assert [v.status for v in manifest.variants].count("skipped") == 1
