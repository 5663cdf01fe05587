"""Standard Webhooks signatures: the specification's own example verifies, and anything
changed (body, id, time, secret) does not."""

from __future__ import annotations

import pytest

from genloop.sdk.webhooks import (
    WebhookVerificationError,
    new_secret,
    sign,
    signed_headers,
    verify,
)

# The example in the Standard Webhooks specification (not computed here)
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID, SPEC_TIME = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_specifications_example_signs_and_verifies():
    assert sign(SPEC_SECRET, SPEC_ID, SPEC_TIME, SPEC_BODY) == SPEC_SIGNATURE
    headers = {"Webhook-Id": SPEC_ID, "Webhook-Timestamp": str(SPEC_TIME),
               "Webhook-Signature": f"v1,bm90IHRoaXMgb25l {SPEC_SIGNATURE}"}  # rotation: two
    verify(headers, SPEC_BODY, SPEC_SECRET, now=SPEC_TIME + 10)


@pytest.mark.parametrize("change", ["body", "id", "stale", "secret", "missing"])
def test_a_changed_delivery_does_not_verify(change):
    secret = new_secret()
    body = b'{"status": "succeeded"}'
    headers = signed_headers(secret, "msg_1", body, timestamp=1_000_000)
    now = 1_000_000 + 5
    if change == "body":
        body = b'{"status": "failed"}'
    elif change == "id":
        headers["webhook-id"] = "msg_2"
    elif change == "stale":
        now += 301
    elif change == "secret":
        secret = new_secret()
    else:
        del headers["webhook-signature"]
    verify(signed_headers(secret, "msg_1", b"x", timestamp=now), b"x", secret, now=now)
    with pytest.raises(WebhookVerificationError):
        verify(headers, body, secret, now=now)


def test_the_readmes_example_receiver_takes_a_signed_delivery_and_refuses_a_forged_one():
    import textwrap
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "gateway.md").read_text()
    block = next(b for b in readme.split("```python")[1:]
                 if "def on_webhook" in b.split("```")[0]).split("```")[0]
    secret = new_secret()
    namespace: dict = {}
    code = textwrap.dedent(block).replace('"whsec_..."', repr(secret))
    exec(code, namespace)  # the documented code, as it stands
    body = b'{"type": "run.ended", "run_id": "r1", "status": "succeeded"}'
    headers = signed_headers(secret, "msg_r1", body)

    assert namespace["on_webhook"](headers, body) == 204
    assert namespace["on_webhook"](headers, body.replace(b"r1", b"r2")) == 400
