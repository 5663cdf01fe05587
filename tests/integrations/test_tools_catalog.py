"""The catalog offers only what a tool call can use: evaluators that need an operator's setting
are left out until the operator supplies it, and then every call naming them carries it."""

from __future__ import annotations

import pytest
from agent_tools import LOOP

from genloop.integrations import Catalog, GenloopTools, openai_tools

#: Built-in evaluators that cannot work from a name alone (a folder, a head, weights, a
#: palette; vlm-judge without its server configured).
NEED_SETTINGS = {"hf-clip", "aesthetic", "composite", "brand-palette", "vlm-judge"}
PALETTE = {"brand-palette": {"palette": ["#ff0000"]}}


@pytest.fixture
def schema(client, monkeypatch):
    monkeypatch.delenv("GENLOOP_VLM_BASE_URL", raising=False)
    monkeypatch.delenv("GENLOOP_VLM_MODEL", raising=False)
    return client.schema()


def test_the_schema_says_what_each_evaluator_needs(schema):
    needs = {n.name: n.needs for n in schema.served.evaluators}

    assert needs["hf-clip"] == ["path"] and needs["aesthetic"] == ["head"]
    assert needs["vlm-judge"] == ["GENLOOP_VLM_BASE_URL", "GENLOOP_VLM_MODEL"]
    assert not needs["clip"] and not needs["shapes-clip"]


def test_served_catalog_leaves_out_evaluators_no_call_can_use(schema):
    catalog = Catalog.served(schema)

    assert not NEED_SETTINGS & set(catalog.evaluators)
    assert {"clip", "shapes-clip"} <= set(catalog.evaluators)
    enum = openai_tools(catalog)[1]["function"]["parameters"]["properties"]["evaluator"]["enum"]
    assert not NEED_SETTINGS & set(enum)


def test_an_evaluator_is_offered_once_the_operator_configures_it(client, schema, monkeypatch):
    assert "brand-palette" in Catalog.served(schema, evaluator_options=PALETTE).evaluators
    monkeypatch.setenv("GENLOOP_VLM_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GENLOOP_VLM_MODEL", "judge")
    assert "vlm-judge" in Catalog.served(client.schema()).evaluators  # its environment is set


def test_options_that_do_not_supply_the_need_are_refused(schema):
    with pytest.raises(ValueError, match="'hf-clip' still needs path"):
        Catalog.served(schema, evaluator_options={"hf-clip": {"device": "cpu"}})


@pytest.mark.slow
def test_calls_naming_a_configured_evaluator_carry_its_options(client, schema):
    catalog = Catalog.served(schema, evaluator_options=PALETTE).model_copy(
        update={"models": ("tiny",)})
    tools = GenloopTools(client, catalog=catalog)

    out = tools.call("run_loop", {**LOOP, "evaluator": "brand-palette", "rounds": 1})

    assert out.done and out.status == "succeeded", out.text
    assert out.best.evaluator.startswith("brand-palette")
