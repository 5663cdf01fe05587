"""A campaign's keys stay what they were: a variant's loop key and its formats' graph key are
pinned, and a field added to Loop or Graph later leaves them alone while at its default (one
that changed them would make a re-run after an upgrade submit and pay for every variant again,
and lose its reviews, which are kept by variant key)."""

from __future__ import annotations

from genloop.campaign import parse_spec
from genloop.campaign.reframe import format_graph, graph_key
from genloop.campaign.runner import loop_key, plan
from genloop.sdk import Graph, Loop, ScoredCandidate

SPEC = parse_spec({
    "name": "keys", "axes": {"product": ["a red sneaker"]}, "template": "{product} on grass",
    "formats": [{"name": "1:1", "width": 64, "height": 64},
                {"name": "9:16", "width": 56, "height": 96}],
    "brand": {"palette": ["#ff0000"], "weight": 10},
    "generate_formats": {"size": "format", "candidates": 2},
    "loop": {"model": "tiny", "evaluator": "clip", "rounds": 2, "candidates": 3, "steps": 4,
             "seed": 7},
})


def _graph() -> Graph:
    record = plan(SPEC)[0]
    pick = ScoredCandidate(index=0, prompt=record.prompt, seed=11, round=1, model="tiny",
                           artifact="a" * 64 + ".png", width=64, height=64, steps=4, score=1.0,
                           evaluator="clip")
    graph = format_graph(SPEC, record, pick)
    assert graph is not None
    return graph


def test_the_keys_of_a_stored_campaign_are_pinned():
    loop = SPEC.loop_for(next(iter(SPEC.variants())))
    assert loop_key(loop) == "campaign:c419c0752aee0ff34c56ed18b90b445d"
    assert graph_key(_graph()) == "campaign-formats:93a47592a3733c33be81b25534f084e3"


class LaterLoop(Loop):
    """Loop as a later release might have it: one more field, whose default keeps the images."""

    sharpen: str = "default"


class LaterGraph(Graph):
    sharpen: str = "default"


def test_reuse_leaves_a_variants_key_alone():
    # Campaigns draw with reuse="auto" since #45; variants stored before keep their keys
    loop = SPEC.loop_for(next(iter(SPEC.variants())))
    assert loop.reuse == "auto"
    assert loop_key(loop.model_copy(update={"reuse": "off"})) == loop_key(loop)


def test_a_field_added_later_changes_no_key_while_at_its_default():
    loop = SPEC.loop_for(next(iter(SPEC.variants())))
    later = LaterLoop(**loop.model_dump())
    assert loop_key(later) == loop_key(loop)
    assert loop_key(later.model_copy(update={"sharpen": "strong"})) != loop_key(loop)
    graph = _graph()
    later_graph = LaterGraph(**graph.model_dump())
    assert graph_key(later_graph) == graph_key(graph)
    assert graph_key(later_graph.model_copy(update={"sharpen": "strong"})) != graph_key(graph)
