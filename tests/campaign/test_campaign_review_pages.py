"""The console's campaign page at scale: a page of variants at a time, filtered and sorted over
all of them on the server, and a decision taking the reviewer back to the page they were on.
A 10,000-variant campaign on one page was 11 MB of HTML, rendered on every decision."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest

from genloop.campaign import parse_spec
from genloop.campaign.manifest import FormatOutput, write_manifest
from genloop.campaign.runlog import RunLog
from genloop.campaign.runner import RUNS_FILE, new_manifest, plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))

from server import LiveServer, console_sign_in  # noqa: E402

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app  # noqa: E402
from genloop.gateway.ui_campaigns import PAGE  # noqa: E402

PRODUCTS, PLACES = 40, 30


def big_campaign(folder: Path) -> list:
    """1,200 finished variants (no images: the page links them), as a run would leave them."""
    spec = parse_spec({
        "name": "big", "axes": {"product": [f"product {i}" for i in range(PRODUCTS)],
                                "place": [f"place {i}" for i in range(PLACES)]},
        "template": "{product} at {place}",
        "formats": [{"name": "1:1", "width": 64, "height": 64}],
        "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 1}})
    records = plan(spec)
    for i, r in enumerate(records):
        r.status, r.images, r.score, r.run_id = "succeeded", 1, (i * 37) % 1000 / 10, f"run-{i}"
        r.artifact = f"{i:064x}.png"
        r.formats = {"1:1": FormatOutput(file=f"formats/1x1/{r.key}.png", method="crop",
                                         source=r.artifact, render_key="x")}
    folder.mkdir(parents=True)
    write_manifest(new_manifest(spec, records), folder)
    log = RunLog(folder / RUNS_FILE)
    for r in records:
        log.record(r.key, r.run_id)
    return records


@pytest.fixture
def console(tmp_path, resources):
    from genloop.workers.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(tmp_path / "home", threads=1, resources=resources)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    records = big_campaign(tmp_path / "out/big")
    store.add_run(records[0].run_id, "acme")  # a campaign is the tenant's whose runs are
    app = create_app(backend, store, GatewaySettings(campaigns=tmp_path / "out"))
    with LiveServer(app) as server:
        http = httpx.Client(base_url=server.url)
        console_sign_in(http, store.create_key("acme"), next="/ui/campaigns")
        yield http, records
        http.close()
    backend.close()
    store.close()


def cards(html: str) -> list[str]:
    return re.findall(r'<article class="variant[^"]*" id="v-([0-9a-f]+)"', html)


def shown(html: str) -> int:
    return int(re.search(r'<output id="shown">(\d+)</output>', html).group(1))


def test_a_large_campaign_is_paged_filtered_and_sorted_on_the_server(console):
    http, records = console
    first = http.get("/ui/campaigns/big")
    assert first.status_code == 200
    assert cards(first.text) == [r.key for r in records[:PAGE]]
    assert shown(first.text) == len(records) and "page 1 of 12" in first.text
    assert len(first.content) < 1_000_000
    # A filter counts every matching variant, not one page's
    one = http.get("/ui/campaigns/big", params={"ax-1": "product 3"})
    assert shown(one.text) == PLACES
    assert cards(one.text) == [r.key for r in records if r.values["product"] == "product 3"]
    # Sorted by score over all of them, page after page (each page grouped per product, in
    # that order within each group)
    by_score = sorted(records, key=lambda r: -r.score)
    second = http.get("/ui/campaigns/big", params={"sort": "score", "page": 2})
    assert sorted(cards(second.text)) == sorted(r.key for r in by_score[PAGE:2 * PAGE])
    by_key = {r.key: r for r in records}
    product = by_key[cards(second.text)[0]].values["product"]
    group = [by_key[k].score for k in cards(second.text)
             if by_key[k].values["product"] == product]
    assert len(group) > 1 and group == sorted(group, reverse=True)
    assert 'href="/ui/campaigns/big?sort=score&amp;page=3"' in second.text


def test_a_decision_returns_to_the_page_it_was_given_on(console):
    http, records = console
    page = http.get("/ui/campaigns/big", params={"sort": "score", "page": 2})
    token = re.search(r'name="token" value="([^"]+)"', page.text).group(1)
    back = re.search(r'name="back" value="([^"]*)"', page.text).group(1)
    key = cards(page.text)[0]
    answer = http.post(f"/ui/campaigns/big/variants/{key}/review", follow_redirects=False,
                       data={"decision": "approved", "token": token, "back": back.replace(
                           "&amp;", "&")})
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/ui/campaigns/big?sort=score&page=2#v-{key}"
    approved = http.get("/ui/campaigns/big", params={"review": "approved"})
    assert cards(approved.text) == [key]
    # Whatever comes back in the form, only a query of this page is made of it.
    answer = http.post(f"/ui/campaigns/big/variants/{key}/review", follow_redirects=False,
                       data={"decision": "rejected", "token": token,
                             "back": "//evil.example/x"})
    assert answer.headers["location"] == f"/ui/campaigns/big#v-{key}"
