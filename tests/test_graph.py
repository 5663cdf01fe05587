"""Graphs and loops: building, validation (every problem at once), JSON round trips."""

from __future__ import annotations

import threading

import pytest
from pydantic import BaseModel, TypeAdapter

from genloop.sdk import Graph, GraphError, Loop, RunSpec, graph_problems, validate_graph
from genloop.sdk.ops import BUILTIN_PARAMS
from genloop.sdk.schema import Named, Served
from genloop.sdk.validation import MAX_NODES_PER_GRAPH, bad_values


def test_builder_graph_round_trips_through_json():
    g = Graph()
    gen = g.generate("a red sneaker", n=8, seed=3, model="tiny", steps=2)
    sc = g.score(gen, text="a red sneaker")
    top = g.select(sc, top_k=2, min_success=6)
    g.add("my-op", inputs=[top], params={"k": 1}, max_retries=2)

    again = Graph.model_validate_json(g.model_dump_json())

    assert again == g
    assert g.node(top).min_success == 6
    assert g.node(gen).params == {"steps": 2, "prompt": "a red sneaker", "n": 8, "seed": 3,
                                  "model": "tiny"}


def test_run_spec_tells_graphs_and_loops_apart():
    adapter = TypeAdapter(RunSpec)
    assert isinstance(adapter.validate_json(Loop(prompt="x").model_dump_json()), Loop)
    assert isinstance(adapter.validate_json('{"kind": "graph", "nodes": []}'), Graph)


def test_valid_graph_has_no_problems():
    g = Graph()
    g.select(g.score(g.generate("p", n=4), text="p"), top_k=1)
    assert graph_problems(g, dict(BUILTIN_PARAMS)) == []


def test_every_problem_is_reported_at_once_with_its_node():
    g = Graph()
    g.add("generate", id="a", params={"prompt": "p", "n": 0, "bogus": 1})
    g.add("select", id="b", inputs=["missing"])
    g.add("nope", id="c")
    g.add("select", id="d", inputs=["e"])
    g.add("select", id="e", inputs=["d"])
    g.add("select", id="f", inputs=["a", "b"], map=True)
    g.add("select", id="g", inputs=["a"], min_backoff=5, max_backoff=1)
    g.nodes.append(g.node("c").model_copy())

    with pytest.raises(GraphError) as err:
        validate_graph(g, dict(BUILTIN_PARAMS))

    by_node = {(p.node_id, p.message.split(":")[0]) for p in err.value.problems}
    paths = {(p.node_id, p.path) for p in err.value.problems}
    assert ("a", "nodes[0].params.n") in paths
    assert ("a", "nodes[0].params.bogus") in paths
    assert ("b", "input 'missing' is not a node of this graph") in by_node
    assert any(n == "c" and m.startswith("unknown op") for n, m in by_node)
    assert ("c", "duplicate node id") in by_node
    assert any(m == "cycle" for _, m in by_node)
    assert ("f", "map=True needs exactly one input to map over") in by_node
    assert ("g", "min_backoff is larger than max_backoff") in by_node
    (backoff,) = [p for p in err.value.problems if p.node_id == "g"]
    assert (backoff.received, backoff.allowed) == (5, "at most max_backoff (1.0)")
    assert "problem(s)" in str(err.value)


def test_values_no_spec_may_hold_are_reported_with_their_node_and_place():
    g = Graph()
    for i in range(50):
        g.add("my-op", id=f"ok{i}", params={"k": [i, 0.5, "fine"]})
    g.add("my-op", id="nan", params={"deep": {"x": [1.0, float("nan")]}})
    g.add("my-op", id="surrogate", params={"text": "a \ud800 b"})

    found = {(p.node_id, p.message) for p in graph_problems(g)}

    assert found == {("nan", "params.deep.x[1]: nan is not a finite number"),
                     ("surrogate", "params.text: not valid Unicode (a lone surrogate)")}


def test_a_bad_value_is_found_at_its_path_in_a_key_or_past_a_key_that_is_no_name():
    why = "nan is not a finite number"
    assert bad_values({"k": float("nan")}) == [("k", why)]  # at the top: no leading dot
    assert bad_values({"a": [1, {"b": float("nan")}]}, "p") == [("p.a[1].b", why)]
    assert bad_values({1: float("nan")}, "p") == [("p", why)]  # a key no name: its dict's
    assert bad_values({"\ud800": 1}, "p") == [("p", "not valid Unicode (a lone surrogate)")]


def test_limits_are_enforced():
    # each graph-wide problem says where (the nodes) and what is allowed
    empty = Graph()
    assert [(p.message, p.path, p.allowed) for p in graph_problems(empty)] == [
        ("the graph has no nodes", "nodes", "at least one node")]

    big = Graph()
    for i in range(MAX_NODES_PER_GRAPH):
        big.add("select", id=f"n{i}")
    assert graph_problems(big) == []  # the most allowed
    big.add("select", id="one-more")
    (too_many,) = [p for p in graph_problems(big) if "at most" in p.message]
    assert (too_many.path, too_many.allowed) == ("nodes", f"at most {MAX_NODES_PER_GRAPH} nodes")

    loop = Graph()
    loop.add("select", id="a", inputs=["b"])
    loop.add("select", id="b", inputs=["a"])
    assert "a graph without cycles" in [p.allowed for p in graph_problems(loop)]

    many = Graph()
    many.generate("p", n=10_000)
    assert any(p.path == "nodes[0].params.n" for p in graph_problems(many, dict(BUILTIN_PARAMS)))


def test_each_input_and_op_problem_says_where_what_was_received_and_what_is_allowed():
    g = Graph()
    g.add("select", id="a", inputs=["missing", "a"], params={"top_k": 1})
    g.add("select", id="b", inputs=["a", "a"], params={"top_k": 1})
    g.add("nope", id="c")
    assert [(p.node_id, p.message, p.path, p.received, p.allowed)
            for p in graph_problems(g, dict(BUILTIN_PARAMS))] == [
        ("a", "input 'missing' is not a node of this graph", "nodes[0].inputs[0]", "missing",
         ["b", "c"]),
        ("a", "a node cannot be its own input", "nodes[0].inputs[1]", "a", None),
        ("b", "the same input is listed twice", "nodes[1].inputs", ["a", "a"], None),
        ("c", "unknown op 'nope'", "nodes[2].op", "nope", sorted(BUILTIN_PARAMS))]


def test_map_backoff_and_cycle_problems_say_where_what_was_received_and_what_is_allowed():
    g = Graph()
    g.add("select", id="a", inputs=[])
    g.add("select", id="b", inputs=["a", "a2"], map=True)
    g.add("select", id="a2", inputs=["a"], min_backoff=5, max_backoff=1)
    g.add("select", id="even", inputs=["a"], min_backoff=1, max_backoff=1)  # equal: allowed
    g.add("select", id="only-min", inputs=["a"], min_backoff=9)  # max unset: allowed
    # a cycle of three behind a diamond, which is none
    g.add("select", id="d1", inputs=["a", "a2"])
    g.add("select", id="x", inputs=["d1", "z"])  # the cycle through its second input
    g.add("select", id="y", inputs=["x"])
    g.add("select", id="z", inputs=["y"])
    assert [(p.node_id, p.message, p.path, p.received, p.allowed) for p in graph_problems(g)] == [
        ("b", "map=True needs exactly one input to map over", "nodes[1].inputs", ["a", "a2"],
         "exactly one node id"),
        ("a2", "min_backoff is larger than max_backoff", "nodes[2].min_backoff", 5.0,
         "at most max_backoff (1.0)"),
        ("y", "cycle: y -> z -> x -> y", "nodes", None, "a graph without cycles")]  # as data flows


def test_forty_stacked_diamonds_are_walked_once_each_for_cycles():
    # A walk that went into finished nodes again would take 2**40 steps here: not a timing
    # target, a bound on the work (it ends in milliseconds; 10 s means it never would)
    g = Graph()
    g.add("select", id="d0")
    for k in range(1, 41):
        g.add("select", id=f"l{k}", inputs=[f"d{k - 1}"])
        g.add("select", id=f"r{k}", inputs=[f"d{k - 1}"])
        g.add("select", id=f"d{k}", inputs=[f"l{k}", f"r{k}"])
    checked: list[list] = []
    walk = threading.Thread(target=lambda: checked.append(graph_problems(g)), daemon=True)
    walk.start()
    walk.join(10)
    assert checked == [[]]


def test_a_params_problem_deep_in_a_value_is_reported_at_its_full_path():
    class Sizes(BaseModel):
        sizes: list[int]

    g = Graph()
    g.add("sized", id="s", params={"sizes": [1, "x"]})
    [problem] = graph_problems(g, {"sized": Sizes})
    assert (problem.node_id, problem.path, problem.received) == (
        "s", "nodes[0].params.sizes[1]", "x")


def test_names_are_checked_when_validating_with_what_the_back_end_serves():
    g = Graph()
    g.generate("p", model="tinny", id="gen")
    served = Served(models=[Named(name="tiny")], evaluators=[], refiners=[], ops=[])
    validate_graph(g, dict(BUILTIN_PARAMS))  # no names known: none checked
    with pytest.raises(GraphError) as refused:
        validate_graph(g, dict(BUILTIN_PARAMS), served)
    assert [(p.node_id, p.path, p.received) for p in refused.value.problems] == [
        ("gen", "nodes[0].params.model", "tinny")]


def test_self_reference_is_a_problem():
    g = Graph()
    g.add("select", id="a", inputs=["a"])
    assert [(p.node_id, p.message, p.path) for p in graph_problems(g)] == [
        ("a", "a node cannot be its own input", "nodes[0].inputs[0]")]


def test_loop_compiles_to_unrolled_rounds():
    g = Loop(prompt="a cat", candidates=4, rounds=3, target=30.0, steps=2).compile()

    ids = [n.id for n in g.nodes]
    assert ids == [
        "round-1/generate", "round-1/score", "round-1/refine",
        "round-2/generate", "round-2/score", "round-2/refine",
        "round-3/generate", "round-3/score",
    ]
    assert g.node("round-2/generate").map and g.node("round-2/generate").inputs == [
        "round-1/refine"]
    assert g.node("round-2/refine").inputs == ["round-1/score", "round-2/score"]
    assert g.node("round-1/refine").params["target"] == 30.0
    assert g.node("round-1/refine").min_success == 1
    assert graph_problems(g, dict(BUILTIN_PARAMS)) == []


def test_a_problem_says_what_was_received_and_allowed_once():
    from genloop.sdk.errors import GraphProblem

    # The SDK's own checks leave both to the problem's fields; a gateway's name checks put them
    # in the message too, for agents that read only messages
    plain = GraphProblem(node_id="g", message="unknown model 'x'", path="nodes[0].params.model",
                         received="x", allowed=["tiny"])
    said = GraphProblem(node_id=None, message="unknown model 'x'; allowed: shapes, tiny",
                        path="model", received="x", allowed=["shapes", "tiny"])
    bare = GraphProblem(node_id="g", message="Input should be greater than or equal to 10",
                        path="nodes[0].params.n", received=1, allowed="at least 10")
    assert str(plain) == "nodes[0].params.model: unknown model 'x'; allowed: ['tiny']"
    assert str(said) == "model: unknown model 'x'; allowed: shapes, tiny"
    assert str(bare) == ("nodes[0].params.n: Input should be greater than or equal to 10 "
                         "(received 1); allowed: at least 10")
