"""A campaign's webhook through the live gateway: one signed ``campaign.ended`` delivery when the
campaign ends (a re-run that changes nothing sends none), and each variant's run end as well
only when the spec asks for it."""

from __future__ import annotations

import json
import time

import httpx
from test_webhooks import with_secret
from webhook_receiver import Receiver

from genloop.campaign import parse_spec, run
from genloop.sdk.webhooks import verify


def spec(name: str, webhook: object) -> dict:
    return {"name": name, "axes": {"product": ["a red circle", "a blue square"]},
            "template": "{product}", "formats": [{"name": "sq", "width": 32, "height": 32}],
            "loop": {"model": "tiny", "rounds": 1, "candidates": 1, "steps": 1},
            "webhook": webhook}


def test_a_campaign_reports_its_end_once_and_its_variants_when_asked(stack, tmp_path):
    key, secret = with_secret(stack)
    client = stack.client(key)
    each, plain = Receiver(), Receiver()
    try:
        hooked = parse_spec(spec("hooked", {"url": each.url, "variants": True}))
        manifest = run(hooked, client, out=tmp_path / "out", timeout=120)
        assert manifest.counts() == {"succeeded": 2}

        each.wait_for(3)
        time.sleep(0.5)  # nothing more comes
        kinds: dict[str, list] = {}
        for headers, body, _ in each.deliveries:
            verify(headers, body, secret)
            kinds.setdefault(json.loads(body)["type"], []).append((headers["webhook-id"], body))
        assert sorted(kinds) == ["campaign.ended", "run.ended"]
        assert sorted(json.loads(b)["run_id"] for _, b in kinds["run.ended"]) == sorted(
            v.run_id for v in manifest.variants)
        (notice_id, body), = kinds["campaign.ended"]
        ended = json.loads(body)
        assert ended["campaign"] == "hooked" and ended["variants"] == ended["succeeded"] == 2
        assert ended["failed"] == ended["skipped"] == 0
        assert ended["spent"] == {"images": manifest.spent_images, "steps": manifest.spent_steps}
        assert {f["run_id"] for f in ended["finalists"]} <= {v.run_id for v in manifest.variants}
        assert len(ended["finalists"]) == ended["finalists_total"] >= 1

        # Run again: every run is found and collected, the end is the same: nothing is sent
        run(hooked, client, out=tmp_path / "out", timeout=120)
        time.sleep(0.5)
        assert len(each.deliveries) == 3
        auth = {"Authorization": f"Bearer {key}"}
        job = httpx.get(f"{stack.url}/v1/webhooks/{notice_id}", headers=auth).json()
        assert job["state"] == "delivered" and job["kind"] == "campaign.ended"
        other, _ = with_secret(stack)
        for method, path in (("GET", f"/v1/webhooks/{notice_id}"),
                             ("POST", f"/v1/webhooks/{notice_id}/replay")):
            response = httpx.request(method, f"{stack.url}{path}",
                                     headers={"Authorization": f"Bearer {other}"})
            assert response.status_code == 404

        # A plain URL: the campaign's end only, not its variants'
        run(parse_spec(spec("plain", plain.url)), client, out=tmp_path / "out", timeout=120)
        (headers, body, _), = plain.wait_for(1)
        time.sleep(0.5)
        assert len(plain.deliveries) == 1 and json.loads(body)["type"] == "campaign.ended"
        verify(headers, body, secret)
    finally:
        each.close()
        plain.close()


def test_a_notice_to_an_address_the_operator_did_not_allow_is_refused(stack):
    key, _ = with_secret(stack)
    auth = {"Authorization": f"Bearer {key}"}
    for url in ("http://10.0.0.7/hook", "http://169.254.169.254/latest", "ftp://example.com/x"):
        response = httpx.post(f"{stack.url}/v1/webhooks", headers=auth, json={
            "url": url, "type": "campaign.ended", "key": "k"})
        assert response.status_code == 422, (url, response.text)
    big = {"url": "https://example.com/h", "type": "campaign.ended", "key": "k",
           "data": {"x": "y" * 20_000}}
    assert httpx.post(f"{stack.url}/v1/webhooks", headers=auth, json=big).status_code == 422


def test_a_notice_is_sent_once_per_key_from_either_client(stack):
    import asyncio

    key, secret = with_secret(stack)
    receiver = Receiver()
    try:
        first = stack.client(key).notify(receiver.url, "batch.ended", "batch-1", jobs=3)

        async def again() -> str:
            async with stack.aclient(key) as aclient:
                return await aclient.notify(receiver.url, "batch.ended", "batch-1", jobs=3)

        assert asyncio.run(again()) == first  # the same key: the same delivery, not a second
        (headers, body, _), = receiver.wait_for(1)
        time.sleep(0.5)
        assert len(receiver.deliveries) == 1 and headers["webhook-id"] == first
        verify(headers, body, secret)
        assert json.loads(body) == {"type": "batch.ended", "jobs": 3}
    finally:
        receiver.close()
