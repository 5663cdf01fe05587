"""The budget arithmetic: images per node (per input item where it applies) and megapixel-steps
with retries, for plain nodes, shards, maps, chains and loops."""

from __future__ import annotations

import pytest

from genloop.sdk import Graph, Loop
from genloop.workers import ops as _builtin_ops  # noqa: F401  (registers the built-in ops)
from genloop.workers.ops.registry import OpRegistry, default_registry, op
from genloop.workers.planner import ImageSize, run_cost

SIZE = ImageSize(steps=10, width=100, height=100)  # 0.01 megapixels, 0.1 megapixel-steps


def cost(spec: Graph | Loop, registry: OpRegistry = default_registry):
    graph = spec.compile() if isinstance(spec, Loop) else spec
    return run_cost(graph, registry, lambda model: SIZE)


def test_a_root_generate_node_makes_n_images_however_it_is_sharded():
    for shard_size in (1, 3, 4, 64):
        g = Graph()
        g.generate("p", n=10, shard_size=shard_size, max_retries=0)
        plan = cost(g)
        assert plan.images == 10
        assert plan.cost == pytest.approx(10 * 0.1)


def test_retries_multiply_the_cost_not_the_images():
    g = Graph()
    g.generate("p", n=2, id="default")              # the op's own 3 retries: 4 attempts
    g.generate("p", n=2, id="none", max_retries=0)
    g.generate("p", n=2, id="many", max_retries=9)
    plan = cost(g)
    assert [plan.nodes[i].cost for i in ("default", "none", "many")] == pytest.approx(
        [2 * 0.1 * 4, 2 * 0.1 * 1, 2 * 0.1 * 10])
    assert plan.images == 6


def test_explicit_steps_and_size_override_the_models_defaults():
    g = Graph()
    g.generate("p", n=3, steps=50, width=200, height=400, max_retries=1)
    assert cost(g).cost == pytest.approx(3 * 0.08 * 50 * 2)


def test_a_generate_node_with_inputs_makes_one_image_per_input_item_mapped_or_not():
    g = Graph()
    first = g.generate("p", n=5, max_retries=0, id="first")
    g.generate(inputs=[first], max_retries=0, id="chained")      # n is not what it makes
    g.generate(inputs=[first], map=True, max_retries=0, id="mapped")
    plan = cost(g)
    assert plan.nodes["chained"].images == 5
    assert plan.nodes["mapped"].images == 5
    assert plan.images == 15


def test_chained_generate_nodes_multiply():
    # Each level's two nodes take both nodes above: the images double per level
    g = Graph()
    above = [g.generate("p", n=1, id="a0"), g.generate("p", n=1, id="b0")]
    for level in range(1, 11):
        above = [g.generate(inputs=above, id=f"{side}{level}") for side in "ab"]
    plan = cost(g)
    assert plan.nodes["a10"].images == 2**10
    assert plan.images == sum(2 * 2**k for k in range(11))


def test_score_passes_counts_on_select_keeps_top_k_refine_asks_for_candidates():
    g = Graph()
    gen = g.generate("p", n=8, id="gen")
    sc = g.score(gen, text="p", id="score")
    top = g.select(sc, top_k=3, id="top")
    g.generate(inputs=[top], map=True, id="again")
    ref = g.refine(sc, prompt="p", candidates=6, id="refine")
    g.generate(inputs=[ref], map=True, id="next")
    plan = cost(g)
    assert [plan.nodes[i].items for i in ("score", "top", "refine")] == [8, 3, 6]
    assert plan.nodes["again"].images == 3
    assert plan.nodes["next"].images == 6
    assert plan.images == 8 + 3 + 6


def test_a_loop_counts_every_round():
    loop = Loop(prompt="p", candidates=4, rounds=5, max_retries=2)
    plan = cost(loop)
    assert plan.images == 4 * 5
    assert plan.cost == pytest.approx(4 * 5 * 0.1 * 3)


def test_a_custom_op_passes_its_input_count_on():
    registry = OpRegistry()
    for spec in default_registry.values():
        registry.register(spec)

    @op("fan", registry=registry)
    def fan(params, inputs, ctx):  # pragma: no cover - never run here
        return []

    g = Graph()
    gen = g.generate("p", n=3, max_retries=0)
    fanned = g.add("fan", inputs=[gen])
    root = g.add("fan")
    g.generate(inputs=[fanned], map=True, max_retries=0, id="after")
    g.generate(inputs=[root], map=True, max_retries=0, id="after-root")
    plan = cost(g, registry)
    assert plan.nodes["after"].images == 3
    assert plan.nodes["after-root"].images == 1


def test_score_nodes_cost_the_items_they_score_when_scoring_is_priced():
    # Given 8 images scored (with one retry), the best 3 scored again (none)
    g = Graph()
    gen = g.generate("p", n=8, max_retries=0, id="gen")
    sc = g.score(gen, text="p", id="score", max_retries=1)
    top = g.select(sc, top_k=3, id="top")
    g.score(top, text="p", id="again", max_retries=0)
    # When scoring one item is priced at 0.5
    plan = run_cost(g, default_registry, lambda model: SIZE, lambda node, params: 0.5)
    # Then each score node costs its items x the price x its attempts, on top of the images
    assert plan.nodes["score"].cost == pytest.approx(8 * 0.5 * 2)
    assert plan.nodes["again"].cost == pytest.approx(3 * 0.5)
    assert plan.cost == pytest.approx(8 * 0.1 + 8 + 1.5) and plan.images == 8
    assert cost(g).cost == pytest.approx(8 * 0.1)  # unpriced, scoring is free


def test_the_run_limits_count_scoring_when_a_fan_out_grows_the_run():
    from genloop.sdk.graph import RunLimits
    from genloop.workers.planner import limits_problem

    # Given a run planned at 3 images, each scored at 1 megapixel-step, within a cost of 5
    g = Graph()
    gen = g.generate("p", n=3, max_retries=0, id="gen")
    g.score(gen, text="p", id="score", max_retries=0)
    limits = RunLimits(items=100, images=100, cost=5, image_costs={"gen": 0.1},
                       score_costs={"score": 1.0})
    assert limits_problem(g, default_registry, limits, "score", {}) is None
    # When the generate node ends with 6 items instead (a custom op's fan-out would do it)
    why = limits_problem(g, default_registry, limits, "score", {"gen": 6})
    # Then the score node may not run: its scoring would take the run past its cost
    assert why is not None and "would cost 6.3 megapixel-steps" in why


def test_an_answer_is_costed_on_top_of_the_planned_scoring():
    from genloop.sdk import GenerationRequest
    from genloop.sdk.graph import RunLimits
    from genloop.workers.planner import answer_cost_problem

    # Given a 2x2 loop planned at 4 images of 1 (2 steps each) and 4 scorings of 0.5: 6
    graph = Loop(prompt="p", candidates=2, rounds=2, steps=2, refiner="agent").compile()
    costs = {n.id: 1.0 for n in graph.nodes if n.op == "generate"}
    steps = {node_id: 2 for node_id in costs}
    scores = {n.id: 0.5 for n in graph.nodes if n.op == "score"}
    refine = next(n.id for n in graph.nodes if n.op == "refine")

    def answer(limit: float) -> str | None:
        graph.limits = RunLimits(items=16, images=16, cost=limit, image_costs=costs,
                                 image_steps=steps, score_costs=scores)
        asked = [GenerationRequest(prompt="p", seed=s, round=2, steps=3) for s in (1, 2)]
        return answer_cost_problem(graph, default_registry, refine, asked, [])

    # When the agent asks 3 steps an image (1 more in all): 7 fits a limit of 7, not one of 6.5
    assert answer(7.0) is None
    assert "taking the run to 7" in (answer(6.5) or "")
