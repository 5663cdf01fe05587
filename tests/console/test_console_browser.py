"""The run console in a real headless browser against a live gateway: sign in with a key, see a
loop in the list, watch its page update while it runs, its images, a failed candidate's error,
cancel a run, and never reach another tenant's run or image."""

from __future__ import annotations

import io
import os
import re

import httpx
import pytest
from browser import browser_page
from PIL import Image
from server import console_sign_in

from genloop.sdk import Client, GenerationRequest, Loop, RefineRequest, RunStatus

pytestmark = pytest.mark.slow



def white_png() -> bytes:
    out = io.BytesIO()
    Image.new("L", (32, 32), 255).save(out, "PNG")
    return out.getvalue()

def agent_loop(prompt: str) -> Loop:
    """Round 1 runs, then the loop waits for the test's answer: the test decides when the
    page sees round 2."""
    return Loop(prompt=prompt, model="tiny", evaluator="clip", candidates=3, rounds=2, steps=2,
                refiner="agent", refine_timeout=120)


def sign_in(page, console, key: str, at: str = "/ui") -> None:
    page.goto(console.url + at)
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("load")


def waiting_refine(run) -> RefineRequest:
    return next(RefineRequest.model_validate_json(e.message) for e in run.events()
                if e.type == "refine.requested")


def test_a_loop_is_listed_and_its_page_follows_it_live(console, tmp_path):
    key = console.key("acme")
    client = Client.http(console.url, api_key=key)
    with browser_page() as page:
        # Given a signed-in tenant and a loop it submitted
        sign_in(page, console, key)
        assert page.inner_text("#tenant") == "acme"
        run = client.submit(agent_loop("a red circle"))
        page.reload()
        row = page.locator(f"tr[data-run='{run.id}']")
        assert row.count() == 1
        row.get_by_role("link").click()
        page.wait_for_url(re.compile(f"/ui/runs/{run.id}$"))
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads

        # When round 1 is scored and the test answers the refine with one broken request
        request = waiting_refine(run)
        page.wait_for_selector("tr.round[data-round='1'] li.cand img >> nth=2")
        progress_before = page.locator("#log li.ev.progress").count()
        first = request.scored[0]
        # (an inpaint whose mask is gone from the artifact store by the time it runs)
        mask = client.upload(white_png())
        (console.home / "artifacts" / mask[:2] / mask).unlink()
        run.refine([GenerationRequest(prompt=request.prompt, seed=101, round=2),
                    GenerationRequest(prompt=request.prompt, seed=102, round=2,
                                      init_image=first.artifact, mask=mask)])

        # Then the page shows round 2 as it happens, without a reload
        failed = page.wait_for_selector("tr.round[data-round='2'] li.cand.failed .error")
        assert "cannot read image artifact" in failed.inner_text()
        page.wait_for_selector("#run-status:has-text('succeeded')")
        page.wait_for_selector("tr.round[data-round='2'] li.cand img")
        assert page.evaluate("window.__sameDocument") is True
        assert page.locator("#log li.ev.progress").count() > progress_before
        node = page.locator("g.node[data-node='round-2/generate']")
        assert "s-succeeded" in node.get_attribute("class")
        counts = node.text_content()
        assert "1/2 done" in counts and "1 failed" in counts, counts
        assert page.locator("tr.round[data-round='1'] li.cand.best").count() == 1

        # and every image, the best one large, is fetched with the session's key and renders
        page.wait_for_function(
            "[...document.querySelectorAll('#rounds img')].every(i => i.complete)")
        widths = page.eval_on_selector_all("#rounds img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == 1 + 3 + 1 and all(w > 0 for w in widths)
        result = run.wait(timeout=60)
        assert page.get_attribute("#best-image", "src").endswith(result.best.artifact)

        shot = tmp_path / "console.png"
        page.set_viewport_size({"width": 1200, "height": 900})
        page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")
    if target := os.environ.get("GENLOOP_CONSOLE_SCREENSHOT"):  # how docs/console.png is made
        from PIL import Image

        with Image.open(shot) as image:  # 128 colours: a third of the bytes, looks the same
            image.convert("RGB").quantize(128).save(target, optimize=True)
    assert result.status == RunStatus.SUCCEEDED and len(result.failures) == 1


def test_the_list_filters_by_status(console):
    key = console.key("filters")
    client = Client.http(console.url, api_key=key)
    done = client.submit(Loop(prompt="a blue square", model="tiny", evaluator="clip",
                              candidates=1, rounds=1, steps=1))
    done.wait(timeout=60)
    with browser_page() as page:
        sign_in(page, console, key)
        page.get_by_label("Status").select_option("succeeded")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile("status=succeeded"))
        assert page.locator(f"tr[data-run='{done.id}']").count() == 1
        page.get_by_label("Status").select_option("failed")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile("status=failed"))
        assert page.locator(f"tr[data-run='{done.id}']").count() == 0


def test_cancel_from_the_run_page(console):
    key = console.key("canceller")
    client = Client.http(console.url, api_key=key)
    run = client.submit(agent_loop("a green triangle"))
    waiting_refine(run)  # running, paused at its refine
    with browser_page() as page:
        sign_in(page, console, key, at=f"/ui/runs/{run.id}")
        page.get_by_role("button", name="Cancel run").click()
        page.wait_for_selector("#run-status:has-text('cancelled')", timeout=30_000)
        assert page.locator("#cancel").is_disabled()
    assert run.wait(timeout=30).status == RunStatus.CANCELLED


def test_another_tenants_run_and_images_are_not_reachable(console):
    key_a, key_b = console.key("alpha"), console.key("beta")
    run = Client.http(console.url, api_key=key_a).submit(
        Loop(prompt="a small star", model="tiny", evaluator="clip", candidates=1, rounds=1,
             steps=1))
    image = run.wait(timeout=60).best.artifact
    with browser_page() as page:
        sign_in(page, console, key_b)
        assert page.locator(f"tr[data-run='{run.id}']").count() == 0
        response = page.goto(f"{console.url}/ui/runs/{run.id}")
        assert response.status == 404 and "Not found" in page.inner_text("h1")
        for path in (f"/ui/artifacts/{image}", f"/ui/runs/{run.id}/events",
                     f"/ui/runs/{run.id}/rounds"):
            assert page.request.get(console.url + path).status == 404, path
    # and nothing is public: without a session an image is 401, a page sends to sign-in
    assert httpx.get(f"{console.url}/ui/artifacts/{image}").status_code == 401
    assert httpx.get(f"{console.url}/ui/runs").headers["location"].startswith("/ui/login")
    with httpx.Client(base_url=console.url) as http:
        assert console_sign_in(http, "gl_nope").status_code == 401
