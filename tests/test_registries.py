"""Registries are passed in: ``Client.local`` runs, serves and validates against the evaluator
registry and the refiners it was given, not the process-wide defaults."""

from __future__ import annotations

import io

import pytest
from PIL import Image
from pydantic import BaseModel

from genloop.evaluators import EvaluatorRegistry, FunctionEvaluator
from genloop.evaluators import default_registry as default_evaluators
from genloop.sdk import Client, GenloopError, Graph, GraphError, RunStatus
from genloop.sdk.ops import Candidate, GenerationRequest
from genloop.workers import OpContext, op
from genloop.workers.ops.refine import RefinerRegistry, default_refiners


class DrawParams(BaseModel):
    n: int = 2


@op("registries-draw", params=DrawParams, output=Candidate)
def draw(params: DrawParams, inputs: list, ctx: OpContext) -> list[Candidate]:
    """Small solid images, one per seed: candidates without a diffusion model."""
    out = []
    for i in range(params.n):
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(buf, format="PNG")
        out.append(Candidate(index=i, prompt="red", seed=i, model="none",
                             artifact=ctx.artifacts.put(buf.getvalue()), width=8, height=8,
                             steps=1))
    return out


def _ours() -> tuple[EvaluatorRegistry, RefinerRegistry]:
    evaluators = EvaluatorRegistry()
    evaluators.register("seven", lambda device: FunctionEvaluator(
        "seven", lambda images, text: [7.0] * len(images), device=device))

    def answer(scored, params) -> list[GenerationRequest]:
        """Always seed 4242."""
        return [GenerationRequest(prompt=params.prompt, seed=4242, round=params.round + 1)]

    return evaluators, RefinerRegistry({"the-answer": answer})


def _graph() -> Graph:
    g = Graph()
    drawn = g.add("registries-draw", id="draw")
    scored = g.add("score", inputs=[drawn], params={"text": "red", "evaluator": "seven"},
                   id="score")
    g.add("refine", inputs=[scored], params={"strategy": "the-answer", "prompt": "red",
                                              "candidates": 1}, id="refine")
    return g


def test_a_custom_evaluator_registry_and_refiner_given_to_client_local_are_used(tmp_path):
    # Given an evaluator and a refiner that only our own registries hold
    evaluators, refiners = _ours()
    assert "seven" not in default_evaluators.names()
    assert "the-answer" not in default_refiners
    # When a local client is given them and runs a graph naming both
    with Client.local(tmp_path / "home", evaluators=evaluators, refiners=refiners) as client:
        served = client.schema().served
        result = client.submit(_graph()).wait(timeout=60)
    # Then they are served, and the score and refine ops ran them
    assert "seven" in [e.name for e in served.evaluators]
    assert "the-answer" in [r.name for r in served.refiners]
    assert result.status == RunStatus.SUCCEEDED, result.failures
    assert [i.score for i in result.items("score")] == [7.0, 7.0]
    assert [i.seed for i in result.items("refine")] == [4242]


def test_without_them_the_same_graph_names_what_this_back_end_does_not_serve(tmp_path):
    with Client.local(tmp_path / "home") as client, pytest.raises(GraphError) as caught:
        client.submit(_graph())
    paths = {p.path for p in caught.value.problems}
    assert {"nodes[1].params.evaluator", "nodes[2].params.strategy"} <= paths


def test_registries_beside_a_given_resources_are_refused(tmp_path, resources):
    evaluators, _ = _ours()
    with pytest.raises(GenloopError, match="give models, evaluators and refiners to your"):
        Client.local(tmp_path / "home", resources=resources, evaluators=evaluators)


def test_a_registry_holds_the_built_in_ops_once_with_builtins_puts_them_there():
    from genloop.workers.ops import BUILTIN_OPS, OpRegistry, default_registry, with_builtins

    # Given a registry of one's own: it holds none of the built-ins until asked
    ours = OpRegistry()
    assert list(ours) == []
    # When the built-ins are put in it (twice: registering the same op again changes nothing)
    assert with_builtins(with_builtins(ours)) is ours
    # Then it holds exactly them, as the default registry does
    assert sorted(ours) == ["generate", "refine", "score", "select"]
    assert all(default_registry[spec.name] is spec for spec in BUILTIN_OPS)
    assert ours["generate"].queue == "gpu" and ours["score"].elementwise
