"""Campaign review in the console, in a real headless browser against a live gateway: a tenant's
campaign (run through the gateway) is listed, two variants are approved (one with a comment),
the decisions survive a reload and a re-run and show in the manifest, the export zip holds
exactly their files, and another tenant reaches none of it."""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import httpx
import pytest
from browser import browser_page

from genloop.campaign import parse_spec, run
from genloop.campaign.manifest import read_manifest
from genloop.sdk import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))

from server import LiveServer, console_sign_in  # noqa: E402

from genloop.gateway import GatewaySettings, SqliteGatewayStore, create_app  # noqa: E402

pytestmark = pytest.mark.slow

SPEC = {
    "name": "review",
    "axes": {"product": ["a red sneaker", "a blue ball"], "scene": ["on grass", "on sand"]},
    "template": "{product} {scene}",
    "copy": {"axis": "product", "headlines": {"a red sneaker": "Run far.",
                                              "a blue ball": "Play on."}},
    "formats": [{"name": "1:1", "width": 96, "height": 96},
                {"name": "9:16", "width": 72, "height": 128}],
    "loop": {"model": "tiny", "evaluator": "clip", "rounds": 1, "candidates": 1, "steps": 2},
}


@pytest.fixture
def gateway(tmp_path, resources):
    from genloop.workers.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(tmp_path / "home", threads=2, resources=resources, lease_ttl=5.0)
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    app = create_app(backend, store, GatewaySettings(campaigns=tmp_path / "out"))
    with LiveServer(app) as server:
        yield server.url, store
    backend.close()
    store.close()


def signed_in(url: str, key: str) -> httpx.Client:
    http = httpx.Client(base_url=url)
    console_sign_in(http, key, next="/ui/campaigns")
    return http


def test_approve_two_reload_export_and_only_the_tenant_sees_it(tmp_path, gateway):
    url, store = gateway
    key = store.create_key("acme")
    spec, out = parse_spec(SPEC), tmp_path / "out"
    with Client.http(url, api_key=key) as client:
        manifest = run(spec, client, out=out)
    chosen = [manifest.variants[0].key, manifest.variants[3].key]
    with browser_page() as page:
        page.goto(url + "/ui/campaigns")
        page.get_by_label("API key").fill(key)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state("load")
        page.get_by_role("link", name="review").click()
        page.wait_for_selector("article.variant")
        assert page.locator("article.variant").count() == 4
        # The previews load lazily: each is brought into view and waited for before it is read
        previews = page.locator(".previews img")
        for i in range(previews.count()):
            previews.nth(i).scroll_into_view_if_needed()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.previews img')].every(i => i.complete)")
        widths = page.eval_on_selector_all(".previews img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == 8 and all(w > 0 for w in widths)
        # Creatives are judged for colour on a neutral card, not on their status's badge colour
        # (a succeeded card was painted the badge's green).
        backgrounds = page.eval_on_selector_all(
            "article.variant", "cards => cards.map(c => getComputedStyle(c).backgroundColor)")
        assert set(backgrounds) <= {"rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"}, backgrounds
        # Approve two, the second with a comment
        page.locator(f"#v-{chosen[0]}").get_by_role("button", name="Approve").click()
        page.wait_for_load_state("load")
        card = page.locator(f"#v-{chosen[1]}")
        card.get_by_label("comment").fill("hero for the launch")
        card.get_by_role("button", name="Approve").click()
        page.wait_for_load_state("load")
        page.reload()
        approved = page.eval_on_selector_all(
            "article.variant[data-review='approved']", "cards => cards.map(c => c.dataset.key)")
        assert sorted(approved) == sorted(chosen)
        assert page.locator(f"#v-{chosen[1]} textarea").input_value() == "hero for the launch"
        with page.expect_navigation():  # filtered on the server, over every page
            page.select_option("select[aria-label='filter by review']", "approved")
        assert page.inner_text("#shown") == "2"
        assert page.locator("article.variant").count() == 2
        # Click to enlarge
        page.locator(f"#v-{chosen[0]} button.enlarge").first.click()
        assert page.locator("#large").is_visible()
        page.get_by_role("button", name="Close").click()
        # Export: exactly the approved variants' creatives, in every format, with a manifest
        with page.expect_download() as download:
            page.get_by_role("link", name="all formats").click()
        data = Path(download.value.path()).read_bytes()
        with page.expect_download() as one_format:
            page.get_by_role("link", name="9:16").click()
        only = zipfile.ZipFile(io.BytesIO(Path(one_format.value.path()).read_bytes()))
    files = {f"{fmt}/{k}.png" for k in chosen for fmt in ("1x1", "9x16")}
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert set(archive.namelist()) == files | {"manifest.json"}
    by_key = {v.key: v for v in manifest.variants}
    for k in chosen:
        assert archive.read(f"1x1/{k}.png") == (out / "review" /
                                                by_key[k].formats["1:1"].file).read_bytes()
    assert set(only.namelist()) == {f"9x16/{k}.png" for k in chosen} | {"manifest.json"}
    # A re-run keeps the decisions and writes them into the manifest.
    with Client.http(url, api_key=key) as client:
        run(spec, client, out=out)
    reviewed = {v.key: v.review for v in read_manifest(out / "review").variants if v.review}
    assert {k: r.decision for k, r in reviewed.items()} == dict.fromkeys(chosen, "approved")
    assert reviewed[chosen[1]].comment == "hero for the launch"
    assert "approved</strong> by acme: hero for the launch" in \
        (out / "review/report.html").read_text()
    # Another tenant reaches neither the campaign, nor its files, nor its export.
    other = signed_in(url, store.create_key("globex"))
    assert "review" not in other.get("/ui/campaigns").text
    file = by_key[chosen[0]].formats["1:1"].file
    for path in ("/ui/campaigns/review", f"/ui/campaigns/review/files/{file}",
                 "/ui/campaigns/review/export"):
        assert other.get(path).status_code == 404
    assert signed_in(url, key).get(f"/ui/campaigns/review/files/{file}").status_code == 200
    assert signed_in(url, key).get("/ui/campaigns/review/files/../runs.jsonl").status_code == 404
