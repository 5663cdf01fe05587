"""The one name check (``sdk/validation.NAMED_FIELDS``) and the gateway's admission over it, in
process: each row and its rules, a tenant's narrowing, and the plan an admitted spec gets."""

from __future__ import annotations

import pytest

from genloop.gateway.admission import default_admission
from genloop.gateway.limits import TenantLimits
from genloop.sdk import Graph, GraphError, Loop
from genloop.sdk.schema import Named, Served
from genloop.sdk.validation import (
    NAMED_FIELDS,
    cache_problems,
    graph_problems,
    loop_name_problems,
    name_problems,
)
from genloop.workers.ops import default_registry
from genloop.workers.runtime.planner import run_cost


def _served(**changes) -> Served:
    fields = dict(models=[Named(name="shapes"), Named(name="tiny")],
                  evaluators=[Named(name="clip"), Named(name="shapes-clip")],
                  refiners=[Named(name="agent"), Named(name="seed-search")], ops=[],
                  default_model="tiny", default_evaluator="clip")
    return Served(**{**fields, **changes})


def _said(problems) -> list[tuple]:
    return [(p.node_id, p.path, p.message, p.received, p.allowed) for p in problems]


def test_each_named_field_of_a_graph_is_checked_where_it_sits():
    g = Graph()
    score = g.score(g.generate("p", model="sd", id="gen"), text="p", evaluator="blip",
                    id="score")
    g.refine(score, prompt="p", strategy="agent", fallback="rerun", id="refine")
    assert _said(name_problems(g, _served())) == [
        ("gen", "nodes[0].params.model", "unknown model 'sd'; allowed: shapes, tiny", "sd",
         ["shapes", "tiny"]),
        ("score", "nodes[1].params.evaluator", "unknown evaluator 'blip'; allowed: clip, "
         "shapes-clip", "blip", ["clip", "shapes-clip"]),
        ("refine", "nodes[2].params.fallback", "unknown fallback 'rerun'; allowed: seed-search",
         "rerun", ["seed-search"]),
    ]
    g.nodes[2].params["strategy"] = "rewrite"
    assert _said(name_problems(g, _served()))[2] == (
        "refine", "nodes[2].params.strategy", "unknown strategy 'rewrite'; allowed: agent, "
        "seed-search", "rewrite", ["agent", "seed-search"])  # and its fallback is not read


def test_a_loop_names_each_field_by_its_own_name():
    loop = Loop(prompt="p", model="sd", evaluator="blip", refiner="agent", fallback="agent")
    assert [(p.path, p.message) for p in name_problems(loop, _served())] == [
        ("model", "unknown model 'sd'; allowed: shapes, tiny"),
        ("evaluator", "unknown evaluator 'blip'; allowed: clip, shapes-clip"),
        ("fallback", "unknown fallback 'agent'; allowed: seed-search"),
    ]
    assert name_problems(loop.model_copy(update={"refiner": "seed-search"}), _served(
        models=[Named(name="sd")], evaluators=[Named(name="blip")])) == []
    assert _said(loop_name_problems({"refiner": "rewrite"}, _served(), prefix="loop.")) == [
        (None, "loop.refiner", "unknown refiner 'rewrite'; allowed: agent, seed-search",
         "rewrite", ["agent", "seed-search"])]


def test_an_unset_name_needs_a_default_only_where_the_back_end_fills_one_in():
    loop = Loop(prompt="p")
    assert name_problems(loop, _served()) == []
    bare = _served(default_model=None, default_evaluator=None, refiners=[])
    assert _said(name_problems(loop, bare)) == [
        (None, "model", "no model named, and this back end has no default model", None,
         ["shapes", "tiny"]),
        (None, "evaluator", "no evaluator named, and this back end has no default evaluator",
         None, ["clip", "shapes-clip"]),
        # a refiner always has a value; with none served, even the default is unknown
        (None, "refiner", "unknown refiner 'seed-search'; allowed: none", "seed-search", []),
    ]
    g = Graph()
    g.generate("p", id="gen")
    g.add("refine", inputs=["gen"], params={"prompt": "p"})
    assert [(p.node_id, p.path) for p in name_problems(g, bare)] == [
        ("gen", "nodes[0].params.model")]


def test_only_trusted_callers_name_a_model_by_path_or_hub_id():
    for name in ("org/model", "/srv/sd15"):
        loop = Loop(prompt="p", model=name)
        assert name_problems(loop, _served()) == []
        assert loop_name_problems({"model": name}, _served()) == []  # a campaign's
        assert [p.received for p in name_problems(loop, _served(), trusted=False)] == [name]
        g = Graph()
        g.generate("p", model=name, id="gen")
        assert name_problems(g, _served()) == []
        assert [p.received for p in name_problems(g, _served(), trusted=False)] == [name]
    # a slash lets only a model through, never another kind of name
    assert [p.path for p in name_problems(Loop(prompt="p", evaluator="org/judge"),
                                          _served())] == ["evaluator"]


def test_a_value_of_another_type_is_left_to_the_params_check():
    g = Graph()
    g.generate("p", id="gen")
    g.nodes[0].params["model"] = 5
    assert name_problems(g, _served()) == []


def test_every_row_is_checked_for_graphs_and_loops():
    # one spec per row, naming it wrongly: a row left out of the walk leaves its problem out
    for row in NAMED_FIELDS:
        loop = Loop.model_validate({"prompt": "p", "refiner": "agent", row.loop: "nope"})
        assert [p.path for p in name_problems(loop, _served())] == [row.loop], row
        g = Graph()
        params = {"strategy": "agent"} if row.op == "refine" else {}
        g.add(row.op, id="n", params={**params, row.param: "nope"})
        assert [p.path for p in name_problems(g, _served())] == [f"nodes[0].params.{row.param}"]


def test_admission_narrows_names_to_the_operators_models_and_the_tenants_lists():
    admission = default_admission(default_registry)
    loop = Loop(prompt="p", rounds=1, candidates=1, model="shapes", evaluator="clip")
    admission.admit(loop, TenantLimits())
    with pytest.raises(GraphError) as caught:
        admission.admit(loop, TenantLimits(models=["tiny", "sd"], evaluators=["shapes-clip"]))
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("model", "unknown model 'shapes'; allowed: tiny"),  # 'sd' is not the operator's
        ("evaluator", "unknown evaluator 'clip'; allowed: shapes-clip"),
    ]
    with pytest.raises(GraphError) as caught:
        admission.admit(Loop(prompt="p", model="org/model"), TenantLimits())
    assert [p.path for p in caught.value.problems] == ["model"]


def test_an_admitted_spec_is_planned_from_one_compile():
    admission = default_admission(default_registry)
    g = Graph()
    gen = g.generate("p", model="tiny", n=3, id="gen")
    g.score(gen, text="p", evaluator="clip", id="score")
    limits = TenantLimits(max_candidates_per_run=40, max_cost_per_run=2.5)
    plan = admission.admit(g, limits)
    assert plan.cost == run_cost(g, default_registry, admission.size_of, admission.score_cost)
    tiny = 32 * 32 / 1e6 * 4 * 4  # megapixel-steps of a tiny image, 4 attempts
    assert (plan.limits.items, plan.limits.images, plan.limits.cost) == (40, 40, 2.5)
    assert plan.limits.image_costs == pytest.approx({"gen": tiny})
    assert plan.limits.image_steps == {"gen": 4}
    assert plan.limits.score_costs == pytest.approx({"score": admission.score_cost(
        g.nodes[1], default_registry["score"].params.model_validate(g.nodes[1].params)) * 4})
    assert plan.cost.images == 3


def test_admission_reports_every_kind_of_problem_once():
    admission = default_admission(default_registry, max_prompt_chars=10, queues={"gpu"})
    g = Graph()
    gen = g.generate("a prompt longer than ten", model="sd", id="gen", queue="gpu")
    g.score(gen, text="p", evaluator="clip", options={"pretrained": "/etc"}, id="score")
    g.add("select", inputs=["score"], params={"top_k": 1}, id="pick")
    with pytest.raises(GraphError) as caught:
        admission.admit(g, TenantLimits())
    said = [(p.node_id, p.message) for p in caught.value.problems]
    assert ("gen", "unknown model 'sd'; allowed: shapes, tiny") in said
    assert ("gen", "params.prompt: 24 characters; at most 10 allowed") in said
    assert ("pick", "no workers consume queue 'cpu'; known: gpu") in said
    assert any(node == "score" and "takes no options from a tenant" in message
               for node, message in said)
    assert len(said) == len(set(said)) == 4


def test_a_model_is_costed_at_its_own_defaults_and_the_engines_where_it_sets_none():
    from genloop.workers.models.models_config import ModelsConfig
    from genloop.workers.runtime.planner import ImageSize

    config = ModelsConfig.model_validate({"models": {
        "house": {"source": "org/house", "steps": 10, "width": 64},  # no folder to read here
        "bare": {"source": "org/bare"}}})
    admission = default_admission(default_registry, config)
    assert admission.size_of("house") == ImageSize(steps=10, width=64, height=512)
    assert admission.size_of("bare") == ImageSize(steps=25, width=512, height=512)
    assert admission.size_of("tiny") == ImageSize(steps=4, width=32, height=32)


def test_scoring_is_costed_by_the_evaluator_and_options_a_node_names():
    from genloop.evaluators.pricing import PASS_COST, score_cost

    admission = default_admission(default_registry)
    options = {"palette": ["#ff0000"] * 32}  # the most a tenant may give
    g = Graph()
    g.score(g.generate("p", model="tiny", id="gen"), text="p", evaluator="brand-palette",
            options=options, id="score", max_retries=0)
    plan = admission.admit(g, TenantLimits())
    assert plan.limits.score_costs["score"] == pytest.approx(
        score_cost("brand-palette", options)) != pytest.approx(PASS_COST)
    # and the run's cost counts it for the one image it scores
    assert plan.cost.nodes["score"].cost == pytest.approx(score_cost("brand-palette", options))


def test_evaluator_options_are_refused_where_they_sit_with_the_tenants_own_names():
    admission = default_admission(default_registry)
    loop = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="clip",
                evaluator_options={"pretrained": "/etc"})
    with pytest.raises(GraphError) as caught:
        admission.admit(loop, TenantLimits())
    assert [(p.node_id, p.path) for p in caught.value.problems] == [
        (None, "evaluator_options")]
    for evaluator, options in (("clip", [1]), (5, {"weights": {}})):
        g = Graph()
        g.score(g.generate("p", model="tiny", id="gen"), text="p", id="score")
        g.nodes[1].params.update(evaluator=evaluator, options=options)
        with pytest.raises(GraphError) as caught:
            admission.admit(g, TenantLimits())
        said = [(p.node_id, p.path, p.message) for p in caught.value.problems]
        assert ("score", "nodes[1].params.options", "give a mapping") in said
    # a composite's parts are names too: the tenant's own list applies to them
    composite = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="composite",
                     evaluator_options={"weights": {"shapes-clip": 1.0}})
    admission.admit(composite, TenantLimits())
    narrow = TenantLimits(evaluators=["composite", "clip"])
    with pytest.raises(GraphError) as caught:
        admission.admit(composite, narrow)
    [problem] = caught.value.problems
    assert (problem.path, problem.message) == (
        "evaluator_options.weights.shapes-clip",
        "unknown evaluator 'shapes-clip'; allowed: clip, composite")
    g = Graph()
    g.score(g.generate("p", model="tiny", id="gen"), text="p", evaluator="composite",
            options=composite.evaluator_options, id="score")
    admission.admit(g, TenantLimits())
    with pytest.raises(GraphError) as caught:
        admission.admit(g, narrow)
    assert [p.path for p in caught.value.problems] == [
        "nodes[1].params.options.weights.shapes-clip"]


def test_an_ensembles_parts_are_the_tenants_names_and_no_combiner_nests_in_it():
    admission = default_admission(default_registry)
    options = {"weights": {"shapes-reader": 0.9, "shapes-clip": -0.2}, "bias": -1.0}
    ensemble = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="ensemble",
                    evaluator_options=options)
    admission.admit(ensemble, TenantLimits())
    narrow = TenantLimits(evaluators=["ensemble", "shapes-reader"])
    with pytest.raises(GraphError) as caught:
        admission.admit(ensemble, narrow)
    assert [(p.path, p.message) for p in caught.value.problems] == [(
        "evaluator_options.weights.shapes-clip",
        "unknown evaluator 'shapes-clip'; allowed: ensemble, shapes-reader")]
    nested = ensemble.model_copy(update={"evaluator_options": {
        "weights": {"composite": 1.0}, "bias": 0, "path": "/etc"}})
    with pytest.raises(GraphError) as caught:
        admission.admit(nested, TenantLimits())
    assert sorted(p.path for p in caught.value.problems) == [
        "evaluator_options.path", "evaluator_options.weights.composite"]
    # weights that are no numbers are refused at submit, before any image is drawn
    for bad, path, said in (
            ({"weights": {"shapes-reader": "0.6"}}, "evaluator_options.weights",
             "weight of 'shapes-reader' must be a finite number, got '0.6'"),
            ({"weights": {"shapes-reader": 1.0}, "bias": "x"}, "evaluator_options.bias",
             "bias must be a finite number, got 'x'")):
        with pytest.raises(GraphError) as caught:
            admission.admit(ensemble.model_copy(update={"evaluator_options": bad}),
                            TenantLimits())
        assert [(p.path, p.message) for p in caught.value.problems] == [(path, said)]
    negative = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="composite",
                    evaluator_options={"weights": {"shapes-clip": -1.0}})
    with pytest.raises(GraphError) as caught:
        admission.admit(negative, TenantLimits())
    assert [(p.path, p.message) for p in caught.value.problems] == [(
        "evaluator_options.weights",
        "weight of 'shapes-clip' is -1.0; weights must be >= 0")]


def test_a_loop_that_names_no_model_gets_the_back_ends_default():
    plan = default_admission(default_registry).admit(
        Loop(prompt="p", rounds=1, candidates=2), TenantLimits())
    assert plan.cost.images == 2


def test_a_cache_mode_is_checked_against_the_model_a_node_names_or_the_default():
    served = _served(cache_modes={"shapes": ["default", "deepcache", "off"]},
                     default_model="shapes")
    g = Graph()
    g.generate("p", model="shapes", cache="fbcache:0.1", id="named")
    g.generate("p", cache="fbcache:0.1", id="default")
    g.generate("p", model="tiny", cache="fbcache:0.1", id="unknown-architecture")
    g.generate("p", model="shapes", cache="deepcache:3", id="allowed")
    g.add("generate", params={"prompt": "p", "model": "shapes"}, id="unset")  # its 'default'
    said = ("model 'shapes' cannot run cache mode 'fbcache:0.1'; it runs default, deepcache, "
            "off")
    assert [(p.node_id, p.path, p.message, p.received, p.allowed)
            for p in name_problems(g, served)] == [
        ("named", "nodes[0].params.cache", said, "fbcache:0.1", ["default", "deepcache", "off"]),
        ("default", "nodes[1].params.cache", said, "fbcache:0.1", ["default", "deepcache", "off"])]
    # and a Loop's, at its own field
    loop = Loop(prompt="p", model="shapes", cache="fbcache:0.1")
    assert _said(cache_problems(loop, served.cache_modes)) == [
        (None, "cache", said, "fbcache:0.1", ["default", "deepcache", "off"])]


def test_an_ops_params_problem_says_where_what_was_received_and_what_is_allowed():
    g = Graph()
    g.add("generate", params={"prompt": "p", "n": 0, "seed": "x", "colour": "red",
                              "negative_prompt": ["a", object()]}, id="gen")
    g.add("score", inputs=["gen"], params={}, id="score")  # text is required
    g.add("generate", params={"prompt": "p", "n": {1}}, id="gen")
    problems = {(p.node_id, p.path): p for p in graph_problems(g, default_registry.catalogue())}
    n = problems["gen", "nodes[0].params.n"]
    assert (n.received, n.allowed) == (0, ">= 1")
    assert problems["gen", "nodes[0].params.seed"].received == "x"
    extra = problems["gen", "nodes[0].params.colour"]
    assert extra.received == "red" and "prompt" in extra.allowed and "seed" in extra.allowed
    item = problems["gen", "nodes[0].params.negative_prompt"]
    assert item.received.startswith("['a', <object object")  # what JSON cannot carry: as text
    missing = problems["score", "nodes[1].params.text"]
    assert (missing.message, missing.received) == ("Field required", None)
    assert problems["gen", "nodes[2].params.n"].received == [1]  # a set, as JSON can carry it
    duplicate = problems["gen", "nodes[2].id"]
    assert (duplicate.received, duplicate.allowed) == ("gen", "an id no other node has")


def test_one_admission_fills_compiles_and_checks_trusted_or_under_a_tenants_policy():
    from genloop.workers.runtime.admission import admit

    loop = Loop(prompt="p", rounds=2, candidates=2, steps=2)
    # Trusted: the back end's defaults are filled in, spec and graph alike, and checked as
    # names like any other (a default the back end does not serve is refused)
    admitted = admit(loop, _served(), default_registry, None)
    assert admitted.spec.model == "tiny" and admitted.spec.evaluator == "clip"
    assert {n.params["model"] for n in admitted.graph.nodes if n.op == "generate"} == {"tiny"}
    with pytest.raises(GraphError) as caught:
        admit(loop, _served(default_model="sd"), default_registry, None)
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("model", "unknown model 'sd'; allowed: shapes, tiny")]
    # Under a tenant's policy, what the tenant wrote is checked against its offer: an unset
    # name is the operator's default, allowed though the tenant could not name it
    admission = default_admission(default_registry, served=_served)
    plan = admission.admit(loop, TenantLimits(models=["shapes"]))
    assert plan.spec.model == "tiny" and plan.graph == admitted.graph
    with pytest.raises(GraphError) as caught:
        admission.admit(loop.model_copy(update={"model": "tiny"}), TenantLimits(models=["shapes"]))
    assert [(p.path, p.message) for p in caught.value.problems] == [
        ("model", "unknown model 'tiny'; allowed: shapes")]
    # and every problem comes at once, the graph's own first, then its queues, then names
    g = Graph()
    g.generate("p", model="sd", id="gen", queue="nowhere")
    g.add("select", inputs=["gen", "missing"], id="pick")
    with pytest.raises(GraphError) as caught:
        admit(g, _served(), default_registry, ["cpu", "gpu"])
    assert [p.path for p in caught.value.problems] == [
        "nodes[1].inputs[1]", None, "nodes[0].params.model"]
