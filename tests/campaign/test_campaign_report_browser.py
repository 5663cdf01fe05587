"""The campaign report in a real browser: every image loads, rows match the manifest, filters
work, and it needs no server (opened from the file system)."""

from __future__ import annotations

import pytest
from browser import browser_page

from genloop.campaign import parse_spec, run
from genloop.campaign.manifest import read_manifest
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
    assert [v.status for v in manifest.variants].count("skipped") == 1
