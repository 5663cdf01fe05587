"""The budget arithmetic: images per node (per input item where it applies) and megapixel-steps
with retries, for plain nodes, shards, maps, chains and loops."""

from __future__ import annotations

import pytest

from genloop.sdk import Graph, Loop
from genloop.workers.ops import OpRegistry, default_registry, op
from genloop.workers.runtime.planner import ImageSize, run_cost

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
    assert {n: c.node_id for n, c in plan.nodes.items()} == {n: n for n in plan.nodes}
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
    from genloop.workers.runtime.planner import limits_problem

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
    from genloop.workers.runtime.planner import answer_cost_problem

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


# -- the run's limits as it runs, and the quorum (planner functions the scheduler calls) -------
def _limited(**limits) -> Graph:
    """a and b make 3 images each; c makes one per item of a's (3)."""
    from genloop.sdk.graph import RunLimits

    g = Graph()
    a = g.generate("p", n=3, id="a", max_retries=0)
    g.generate("p", n=3, id="b", max_retries=0)
    g.generate(inputs=[a], id="c", max_retries=0)
    g.limits = RunLimits(**limits)
    return g


def _limits_problem(g: Graph, node_id: str) -> str | None:
    from genloop.workers.runtime.planner import limits_problem

    return limits_problem(g, default_registry, g.limits, node_id, {})


def test_a_run_may_take_exactly_its_limits():
    g = _limited(items=3, images=9, cost=9.0, image_costs={"a": 1.0, "b": 1.0, "c": 1.0})
    assert _limits_problem(g, "c") is None


def test_a_node_past_its_items_is_named_and_only_that_node():
    g = _limited(items=2, images=100)
    assert _limits_problem(g, "c") == ("3 input items; at most 2 per node (an op upstream "
                                       "returned more items than planned)")
    assert _limits_problem(g, "b") is None  # c is over, b is not


def test_a_run_past_its_images_or_cost_counts_every_node():
    over_images = _limited(items=10, images=8)
    over_cost = _limited(items=10, images=100, cost=8.0,
                         image_costs={"a": 1.0, "b": 1.0, "c": 1.0})
    assert _limits_problem(over_images, "c") == (
        "the run would generate 9 images; at most 8 (an op upstream returned more items than "
        "planned)")
    assert _limits_problem(over_cost, "c") == (
        "the run would cost 9 megapixel-steps; at most 8 (an op upstream returned more items "
        "than planned)")


def _quorum(min_success: int | None, map_: bool, ok: int, failed: list[tuple[str, int]]):
    from genloop.workers.runtime.planner import quorum_problem
    from genloop.workers.stores.records import FailedItem, ItemRef

    g = Graph()
    gen = g.generate("p", n=4, id="gen")
    g.generate(inputs=[gen], id="next", map=map_, min_success=min_success)
    node = g.nodes[-1]
    return quorum_problem(node, default_registry[node.op],
                          [ItemRef(key=f"k{i}", index=0) for i in range(ok)],
                          [FailedItem(node_id="gen", instance_id=i, error_type="Permanent",
                                      message="boom", items=n) for i, n in failed])


def test_the_quorum_names_what_succeeded_of_what_was_asked_and_every_loss():
    # a reducing node asks for every item: 1 of 4 (one lost instance held 2, another 1)
    assert _quorum(None, False, 1, [("gen#1", 2), ("gen#3", 1)]) == (
        "1 of 4 input items succeeded, min_success=4. Failed: gen#1: Permanent: boom; "
        "gen#3: Permanent: boom")
    assert _quorum(2, False, 1, [("gen#1", 1)]).startswith("1 of 2 input items succeeded, "
                                                             "min_success=2.")
    assert _quorum(2, False, 2, [("gen#1", 2)]) is None
    # an element-wise node needs one: 1 of 4 runs, 0 of 2 does not
    assert _quorum(None, True, 1, [("gen#1", 3)]) is None
    assert _quorum(None, True, 0, [("gen#1", 2)]).startswith("0 of 2 input items succeeded, "
                                                             "min_success=1.")


def test_an_unknown_op_is_a_graph_problem_naming_its_node():
    from genloop.sdk import GraphError
    from genloop.workers.runtime.planner import op_spec

    g = Graph()
    g.add("no-such-op", id="x")
    with pytest.raises(GraphError) as caught:
        op_spec(default_registry, g.nodes[0])
    (problem,) = caught.value.problems
    assert (problem.node_id, problem.message) == ("x", "unknown op 'no-such-op'")


def test_instances_carry_their_nodes_retry_settings_and_a_shards_own_size():
    from genloop.workers.runtime.planner import expand

    g = Graph()
    g.generate("p", n=10, shard_size=4, id="gen", max_retries=5, min_backoff=7, max_backoff=9)
    node = g.nodes[0]
    instances = expand("r", node, default_registry[node.op], [])
    assert [i.expected_items for i in instances] == [4, 4, 2]
    assert {(i.max_retries, i.min_backoff, i.max_backoff) for i in instances} == {(5, 7, 9)}


def test_an_instance_expects_an_item_per_input_element_wise_and_one_from_a_reducer():
    from genloop.workers.runtime.planner import expand
    from genloop.workers.stores.records import ItemRef

    g = Graph()
    gen = g.generate("p", n=3, id="gen")
    g.score(gen, text="p", id="score")
    g.add("select", inputs=["score"], params={"top_k": 2}, id="pick")
    inputs = [ItemRef(key="k", index=i) for i in range(3)]
    score, pick = g.nodes[1], g.nodes[2]
    assert [i.expected_items for i in expand("r", score, default_registry["score"], inputs)
            ] == [3]
    assert [i.expected_items for i in expand("r", pick, default_registry["select"], inputs)
            ] == [1]


# -- an agent's answer to a refine node, costed against the run's limit ----------------------
def _answered_loop(limit: float | None, **limits) -> tuple[Graph, str]:
    """A 2x2 agent loop planned at 6 megapixel-steps (4 images of 1, 2 steps each, and 4
    scorings of 0.5) under a cost limit of ``limit``; its refine node's id."""
    from genloop.sdk.graph import RunLimits

    graph = Loop(prompt="p", candidates=2, rounds=2, steps=2, refiner="agent").compile()
    gens = [n.id for n in graph.nodes if n.op == "generate"]
    limits = {"image_costs": dict.fromkeys(gens, 1.0), "image_steps": dict.fromkeys(gens, 2),
              "score_costs": {n.id: 0.5 for n in graph.nodes if n.op == "score"}, **limits}
    graph.limits = RunLimits(items=16, images=16, cost=limit, **limits)
    return graph, next(n.id for n in graph.nodes if n.op == "refine")


def _asks(*steps: int | None, **edit) -> list:
    from genloop.sdk import GenerationRequest

    return [GenerationRequest(prompt="p", seed=s, round=2, steps=n, **edit)
            for s, n in enumerate(steps)]


def _answer_problem(graph: Graph, refine: str, asked: list, earlier=()) -> str | None:
    from genloop.workers.runtime.planner import answer_cost_problem

    return answer_cost_problem(graph, default_registry, refine, asked, list(earlier))


def test_earlier_answers_count_what_they_added_and_never_what_they_saved():
    graph, refine = _answered_loop(7.5)
    more, fewer = _asks(3, 3), _asks(1, 1)  # one megapixel-step more in all; one less
    # Given an earlier answer that added 1 (to 7): another adding 1 takes the run to 8
    assert "taking the run to 8;" in (_answer_problem(graph, refine, more, [(refine, more)]) or "")
    # Given an earlier answer that asked fewer steps: its saving is not spent twice, and 7 fits
    assert _answer_problem(graph, refine, more, [(refine, fewer)]) is None
    # And an answer at the planned steps is never refused, even with the slack used up
    graph, refine = _answered_loop(6.5)
    assert _answer_problem(graph, refine, _asks(2, 2), [(refine, more)]) is None


def test_an_answer_without_a_cost_limit_or_a_priced_round_costs_nothing_more():
    assert _answer_problem(*_answered_loop(None), _asks(200, 200)) is None
    # a limit that prices no step of the next round's node (its steps unknown)
    graph, refine = _answered_loop(6.0, image_steps={})
    assert _answer_problem(graph, refine, _asks(200, 200)) is None


def test_an_answer_counts_the_steps_each_image_denoises():
    graph, refine = _answered_loop(6.0)  # exactly the plan: any step more is refused
    # An edit at half strength of 4 steps denoises 2, what the round was planned at
    assert _answer_problem(graph, refine, _asks(4, 4, init_image="k", strength=0.5)) is None
    # An image without steps takes the node's own
    assert _answer_problem(graph, refine, _asks(None, None)) is None
    # A strength without an image to edit, or an image without a strength, runs all 4
    for edit in ({"strength": 0.5}, {"init_image": "k"}):
        assert "taking the run to 8;" in (_answer_problem(graph, refine, _asks(4, 4, **edit))
                                          or ""), edit
    # Only the node's candidates count, however many images the answer lists
    graph, refine = _answered_loop(7.0)
    assert _answer_problem(graph, refine, _asks(3, 3, 3)) is None


def test_an_answer_is_priced_at_the_generate_node_its_refine_node_feeds():
    from genloop.sdk.graph import RunLimits

    # Given round 1 at 2 steps (1 an image) and round 2, the answered one, at 4 (2 an image)
    graph, refine = _answered_loop(8.0)
    first, target = [n.id for n in graph.nodes if n.op == "generate"]
    assert refine in next(n for n in graph.nodes if n.id == target).inputs
    graph.limits = RunLimits(items=16, images=16, cost=8.0,
                             image_costs={first: 1.0, target: 2.0},
                             image_steps={first: 2, target: 4},
                             score_costs=graph.limits.score_costs)
    # Then an answer at round 2's own 4 steps adds nothing to the plan's 8
    assert _answer_problem(graph, refine, _asks(4, 4)) is None


def test_an_answer_to_a_refine_node_that_feeds_no_generate_node_costs_nothing_more():
    from genloop.sdk.graph import RunLimits

    g = Graph()
    gen = g.generate("p", n=2, id="gen", max_retries=0)
    sc = g.score(gen, text="p", id="score", max_retries=0)
    g.add("refine", inputs=[sc], params={"prompt": "p"}, id="refine")  # no candidates named
    g.limits = RunLimits(items=16, images=16, cost=2.0, image_costs={"gen": 1.0},
                         image_steps={"gen": 2})
    assert _answer_problem(g, "refine", _asks(9, 9)) is None
    # And one whose refine node names no candidates is costed at the op's default (8), as the
    # plan counted its round: 2 + 8 images planned, so 8 images at 3 steps add 4
    g.generate(inputs=["refine"], map=True, id="next", max_retries=0)
    g.limits = RunLimits(items=16, images=16, cost=14.0, image_costs={"gen": 1.0, "next": 1.0},
                         image_steps={"gen": 2, "next": 2})
    assert _answer_problem(g, "refine", _asks(3, 3, 3)) is None  # fewer images than planned
    assert _answer_problem(g, "refine", _asks(*[3] * 8)) is None  # 10 + 4: 14
    assert _answer_problem(g, "refine", _asks(*[3] * 9)) is None  # the ninth is not run
    assert "taking the run to 18;" in (_answer_problem(g, "refine", _asks(*[4] * 8)) or "")


def test_a_node_the_limits_price_no_image_of_counts_nothing():
    g = _limited(items=10, images=100, cost=3.0, image_costs={"a": 1.0})
    assert _limits_problem(g, "c") is None  # a's 3 images at 1; b's and c's unpriced


def test_a_megapixel_step_is_a_million_pixels_denoised_once():
    g = Graph()
    g.generate("p", n=1, steps=10, width=1000, height=1000, max_retries=0)
    assert cost(g).cost == 10.0


def test_shards_number_their_first_image_and_params_are_stored_as_json():
    from pydantic import BaseModel

    from genloop.workers.runtime.planner import expand

    g = Graph()
    g.generate("p", n=10, shard_size=4, id="gen")
    node = g.nodes[0]
    assert [i.params["first"] for i in expand("r", node, default_registry[node.op], [])] == [
        0, 4, 8]
    # and a mapped node's instances their item's place
    from genloop.workers.stores.records import ItemRef

    mapped = g.generate(inputs=["gen"], map=True, id="mapped")
    node = next(n for n in g.nodes if n.id == mapped)
    refs = [ItemRef(key="k", index=i) for i in range(3)]
    assert [i.params["first"] for i in expand("r", node, default_registry[node.op], refs)] == [
        0, 1, 2]

    class Pair(BaseModel):
        pair: tuple[int, int] = (1, 2)

    registry = OpRegistry()

    @op("pair", params=Pair, registry=registry)
    def pair(params, inputs, ctx):  # pragma: no cover - never run here
        return []

    g = Graph()
    g.add("pair", id="x")
    (instance,) = expand("r", g.nodes[0], registry["pair"], [])
    assert instance.params == {"pair": [1, 2]}  # as the store keeps it, not a tuple
