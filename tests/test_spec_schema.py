"""Specs an LLM can write: described fields, examples that hold, the published schema, the back
end's defaults, and validation problems that say where, what and what instead."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from genloop.evaluators import default_registry as evaluator_registry
from genloop.sdk import (
    Graph,
    GraphError,
    Loop,
    Node,
    RunStatus,
    Served,
)
from genloop.sdk.ops import BUILTIN_PARAMS, GenerateParams, RefineParams, ScoreParams, SelectParams
from genloop.sdk.validation import graph_problems
from genloop.workers import default_registry
from genloop.workers.ops.refine import default_refiners

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_SPECS = [Graph, Node, Loop, GenerateParams, ScoreParams, SelectParams, RefineParams]


def _undescribed(schema: dict) -> list[str]:
    """Every property, in the schema and its $defs, that has no description."""
    missing = []
    for name, model in [("", schema), *schema.get("$defs", {}).items()]:
        for field, prop in model.get("properties", {}).items():
            if not prop.get("description", "").strip():
                missing.append(f"{name or model.get('title')}.{field}")
    return missing


@pytest.mark.parametrize("model", PUBLIC_SPECS, ids=lambda m: m.__name__)
def test_every_field_of_the_public_spec_models_is_described(model: type[BaseModel]):
    schema = model.model_json_schema()
    assert _undescribed(schema) == []
    assert len(schema["properties"]) == len(model.model_fields)


@pytest.mark.parametrize("model", PUBLIC_SPECS, ids=lambda m: m.__name__)
def test_the_examples_validate_and_round_trip(model: type[BaseModel]):
    examples = model.model_json_schema()["examples"]
    assert examples
    for example in examples:
        parsed = model.model_validate(example)
        assert model.model_validate_json(parsed.model_dump_json()) == parsed
        assert parsed.model_dump(mode="json", exclude_unset=True) == example


def test_the_schema_lists_what_the_local_back_end_serves(client):
    # Given Client.local with the test ops registered; When its schema is asked for
    schema = client.schema()
    models = client.backend.runtime.resources.models.builtin()

    # Then every enum is exactly what the registries hold
    loop = schema.loop["properties"]
    assert loop["model"]["enum"] == sorted(models) + [None]
    assert loop["evaluator"]["enum"] == evaluator_registry.names() + [None]
    assert loop["refiner"]["enum"] == default_refiners.names()
    assert "'shapes':" in loop["model"]["description"]
    defs = schema.graph["$defs"]
    variants = [v["$ref"].rsplit("/", 1)[1] for v in
                schema.graph["properties"]["nodes"]["items"]["anyOf"]]
    ops = [defs[v]["properties"]["op"]["const"] for v in variants]
    assert ops == sorted(default_registry) and "test-count" in ops
    assert defs["params_generate"]["properties"]["model"]["enum"] == sorted(models) + [None]
    assert defs["params_score"]["properties"]["evaluator"]["enum"][:-1] == \
        evaluator_registry.names()
    assert defs["params_refine"]["properties"]["strategy"]["enum"] == default_refiners.names()
    assert set(defs["params_test-count"]["properties"]) >= {"log", "value"}
    assert (schema.served.default_model, schema.served.default_evaluator) == \
        ("shapes", "shapes-clip")
    # and every built-in name says what it is (an agent picks from these descriptions)
    served = schema.served
    builtin = [n for n in served.models + served.evaluators + served.refiners
               if "test" not in n.name]  # other tests register undescribed ones
    assert all(n.description for n in builtin), [n.name for n in builtin if not n.description]


@pytest.mark.slow
def test_the_default_loop_in_client_local_uses_the_shipped_trained_models(client):
    result = client.submit(Loop(prompt="a red circle", candidates=1, rounds=1, steps=2)).wait(
        timeout=300)

    assert result.status == RunStatus.SUCCEEDED
    (best,) = result.rounds[0].candidates
    assert (best.model, best.evaluator) == ("shapes", "shapes-clip")


def test_every_problem_comes_with_its_path_what_was_received_and_what_is_allowed(client):
    g = Graph.model_validate({"kind": "graph", "nodes": [
        {"id": "gen", "op": "generate", "params": {"prompt": "p", "n": 0, "model": "sdxl"}},
        {"id": "score", "op": "score", "inputs": ["gen"],
         "params": {"text": "p", "evaluator": "clipp", "weight": 2}},
        {"id": "best", "op": "selekt", "inputs": ["scores"]},
    ]})

    with pytest.raises(GraphError) as caught:
        client.submit(g)

    problems = {p.path: p for p in caught.value.problems}
    assert set(problems) == {"nodes[0].params.n", "nodes[0].params.model",
                             "nodes[1].params.evaluator", "nodes[1].params.weight",
                             "nodes[2].op", "nodes[2].inputs[0]"}
    assert problems["nodes[0].params.n"].received == 0
    assert problems["nodes[0].params.n"].allowed == ">= 1"
    assert problems["nodes[0].params.model"].allowed == sorted(
        client.backend.runtime.resources.models.builtin())
    assert problems["nodes[1].params.evaluator"].allowed == evaluator_registry.names()
    assert "evaluator" in problems["nodes[1].params.weight"].allowed
    assert "select" in problems["nodes[2].op"].allowed
    assert problems["nodes[2].inputs[0]"].received == "scores"
    assert "nodes[1].params.evaluator: unknown evaluator 'clipp'" in str(caught.value)


def test_a_loops_names_are_checked_at_their_own_paths(client):
    with pytest.raises(GraphError) as caught:
        client.submit(Loop(prompt="p", model="sd15", evaluator="shapes-clip", refiner="guess"))
    assert {(p.path, p.received) for p in caught.value.problems} == {
        ("model", "sd15"), ("refiner", "guess")}


def test_unset_names_need_a_default_and_paths_are_left_to_trusted_callers():
    g = Graph()
    g.generate("p", model="some/local-or-hub-model")  # trusted callers may name these
    g.score(g.generate("p", id="two"), text="p")  # unset: the back end's default
    served = Served(models=[], evaluators=[], refiners=[], ops=[], default_model="m",
                    default_evaluator="e")
    assert graph_problems(g, dict(BUILTIN_PARAMS), served) == []
    no_defaults = served.model_copy(update={"default_model": None, "default_evaluator": None})
    assert {p.path for p in graph_problems(g, dict(BUILTIN_PARAMS), no_defaults)} == {
        "nodes[1].params.model", "nodes[2].params.evaluator"}


def _readme_examples() -> list[dict]:
    text = (ROOT / "docs" / "specs.md").read_text()  # the README's "Writing specs", moved
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]


@pytest.mark.slow
def test_the_readme_examples_run(client):
    spec = importlib.util.spec_from_file_location("custom_op_example",
                                                  ROOT / "examples" / "custom_op.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the `check` op the third example uses
    examples = _readme_examples()
    assert [e["kind"] for e in examples] == ["loop", "graph", "graph"]

    for example in examples:
        spec_model = Loop if example["kind"] == "loop" else Graph
        result = client.submit(spec_model.model_validate(example)).wait(timeout=600)
        assert result.status == RunStatus.SUCCEEDED, result.failures
        assert result.best is not None and result.best.model == "shapes"
