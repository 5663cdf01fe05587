"""``client.runs()`` on a client's own back end: the state store's listing, labels kept with
the run, and a spec without labels keeping the idempotency hash it had before labels."""

from __future__ import annotations

from genloop.sdk import Graph, Loop
from genloop.workers.runtime.keys import spec_hash


def test_a_local_client_lists_its_runs_by_label_and_status(client):
    def graph(label: str, **labels: str) -> Graph:
        g = Graph(labels=labels)
        g.generate(label, n=1, steps=1, model="tiny", id="gen")
        return g

    first = client.submit(graph("a red circle", campaign="spring"))
    second = client.submit(graph("a blue square", campaign="spring", variant="2"))
    other = client.submit(graph("a green star", campaign="autumn"))
    for run in (first, second, other):
        run.wait(timeout=120)

    spring = list(client.runs(labels={"campaign": "spring"}, page_size=1))
    assert [r.id for r in spring] == [second.id, first.id]
    assert spring[0].labels == {"campaign": "spring", "variant": "2"}
    assert [r.id for r in client.runs(status=["succeeded"])] == [other.id, second.id, first.id]
    assert list(client.runs(status=["failed"])) == []
    assert [r.id for r in client.runs(status="succeeded")] == [other.id, second.id, first.id]


def test_labels_leave_the_hash_of_a_spec_without_them_as_it_was():
    loop = Loop(prompt="p", model="tiny")
    dumped = loop.model_dump(mode="json")
    before_labels = {k: v for k, v in dumped.items() if k != "labels"}
    assert spec_hash(dumped) == spec_hash(before_labels)
    labelled = loop.model_copy(update={"labels": {"a": "b"}}).model_dump(mode="json")
    assert spec_hash(labelled) != spec_hash(dumped)


def test_a_webhook_on_a_back_end_that_cannot_deliver_it_is_refused(client):
    import pytest

    from genloop.sdk import GraphError

    with pytest.raises(GraphError, match="webhooks are delivered by a gateway"):
        client.submit(Loop(prompt="p", model="tiny", webhook={"url": "https://example.com/h"}))
    assert list(client.runs()) == []


def test_a_campaign_webhook_or_notice_without_a_gateway_is_refused_before_anything_runs(
        client, tmp_path):
    import pytest

    from genloop.campaign import CampaignSpecError, parse_spec, run
    from genloop.sdk import GraphError

    with pytest.raises(GraphError, match="webhooks are delivered by a gateway"):
        client.notify("https://example.com/h", "campaign.ended", "k")
    spec = parse_spec({"name": "c", "axes": {"p": ["a red circle"]}, "template": "{p}",
                       "loop": {"model": "tiny", "rounds": 1, "candidates": 1, "steps": 1},
                       "webhook": "https://example.com/h"})
    with pytest.raises(CampaignSpecError, match="webhook"):
        run(spec, client, out=tmp_path)
    assert list(client.runs()) == []
