"""One name check for every entry: the SDK's back end, the gateway, the agent tools and campaigns
refuse the same bad spec with the same problems (``sdk/validation.py``'s ``NAMED_FIELDS``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from genloop.gateway import Gateway, SqliteGatewayStore
from genloop.integrations import Catalog, GenloopTools, ToolCallError
from genloop.sdk import Client, Graph, GraphError, Loop
from genloop.workers.backends.embedded import EmbeddedBackend


def _refusal(client: Client, spec: Graph | Loop) -> list[tuple]:
    with pytest.raises(GraphError) as caught:
        client.submit(spec)
    return [(p.node_id, p.path, p.message, p.received, p.allowed) for p in caught.value.problems]


def _bad_graph() -> Graph:
    g = Graph()
    score = g.score(g.generate("p", model="tinny", id="gen"), text="p", id="score")
    g.refine(score, prompt="p", strategy="agent", fallback="agent", id="ask")
    g.refine(score, prompt="p", strategy="no-such-strategy", id="pick")
    return g


def test_a_queue_no_worker_consumes_is_refused_alike_in_process_and_over_http(stack):
    _, key = stack.tenant()
    g = Graph()
    g.generate("p", model="tiny", id="gen", queue="no-such-queue")
    here, there = _refusal(Client(stack.backend), g), _refusal(stack.client(key), g)
    assert here == there
    [(node_id, _, message, _, _)] = here
    assert node_id == "gen" and message.startswith("no workers consume queue 'no-such-queue'; "
                                                   "known: ")
    # and beside a bad name and a graph's own problem, every problem at once, in one order
    g.nodes[0].params["model"] = "tinny"
    g.add("select", inputs=["gen", "nowhere"], params={"top_k": 1}, id="pick")
    here, there = _refusal(Client(stack.backend), g), _refusal(stack.client(key), g)
    assert here == there
    assert [p[1] for p in here] == ["nodes[1].inputs[1]", None, "nodes[0].params.model"]


@pytest.fixture
def gateway_in_code(tmp_path) -> Iterator[Gateway]:
    """A gateway built on a back end with no admission given (not the app's): it must check
    and fill in what that back end serves, here a default model other than the preferred."""
    backend = EmbeddedBackend(tmp_path / "home", threads=1, default_model="tiny")
    store = SqliteGatewayStore(tmp_path / "gateway.db")
    gateway = Gateway(backend, store)
    yield gateway
    gateway.stop()
    store.close()
    backend.close()


def test_a_gateway_built_in_code_refuses_a_queue_its_back_end_does_not_consume(
        gateway_in_code):
    # (or the run would wait for a worker forever)
    g = Graph()
    g.generate("p", model="tiny", id="gen", queue="no-such-queue")
    with pytest.raises(GraphError) as caught:
        gateway_in_code.submit("t", g, None)
    assert [(p.node_id, p.path, p.message, p.received, p.allowed)
            for p in caught.value.problems] == _refusal(Client(gateway_in_code.backend), g)
    assert caught.value.problems[0].message.startswith("no workers consume queue")
    assert gateway_in_code.store.stored_runs("t") == 0  # nothing was started


def test_a_gateway_built_in_code_fills_in_its_back_ends_default_model(gateway_in_code):
    # Given a back end whose default model is tiny (shapes is preferred where none is set),
    # When a loop naming no model is submitted, Then it runs on the back end's default
    info, _ = gateway_in_code.submit("t", Loop(prompt="p", rounds=1, candidates=1), None)
    assert gateway_in_code.backend.store.run_spec(info.id).spec["model"] == "tiny"
    gateway_in_code.backend.cancel(info.id)  # (its images are not what this test is about)


def test_the_sdk_and_the_gateway_refuse_a_bad_spec_with_the_same_problems(stack):
    _, key = stack.tenant()
    loop = Loop(prompt="p", rounds=2, candidates=1, model="tinny", refiner="agent",
                fallback="agent")
    trusted = Client(stack.backend)  # what Client.local / Client.connect submit through
    tenant = stack.client(key)
    for spec in (loop, _bad_graph()):
        # Given the same spec, when it is submitted in-process and over HTTP as a tenant
        here, there = _refusal(trusted, spec), _refusal(tenant, spec)
        # Then both refuse it with the same problems, each naming where and what is allowed
        assert here == there
    refiners = [n.name for n in stack.backend.schema().served.refiners]
    fallbacks = [n for n in refiners if n != "agent"]
    assert here == [
        ("gen", "nodes[0].params.model", "unknown model 'tinny'; allowed: shapes, tiny",
         "tinny", ["shapes", "tiny"]),
        ("ask", "nodes[2].params.fallback", "unknown fallback 'agent'; allowed: "
         + ", ".join(fallbacks), "agent", fallbacks),
        ("pick", "nodes[3].params.strategy", "unknown strategy 'no-such-strategy'; allowed: "
         + ", ".join(refiners), "no-such-strategy", refiners),
    ]


def test_a_fallback_is_checked_only_where_the_agent_strategy_reads_it(stack):
    _, key = stack.tenant()
    # A loop whose refiner is not 'agent' never reads its fallback: no name of it is refused
    loop = Loop(prompt="p", rounds=1, candidates=1, model="tiny", refiner="seed-search",
                fallback="agent")
    assert stack.client(key).submit(loop).wait(timeout=120).status == "succeeded"


def test_the_tools_and_campaigns_say_the_problems_the_sdk_says(stack):
    from genloop.campaign.names import name_problems
    from genloop.campaign.spec import parse_spec

    _, key = stack.tenant()
    loop = Loop(prompt="a red circle", rounds=1, candidates=1, model="tinny")
    with pytest.raises(GraphError) as refused:
        Client(stack.backend).submit(loop)
    said = [str(p) for p in refused.value.problems]
    assert said == ["model: unknown model 'tinny'; allowed: shapes, tiny"]
    # Given a tool catalog an operator wrote with a model the back end does not serve
    tools = GenloopTools(stack.client(key), catalog=Catalog(models=("tinny", "tiny")))
    # When an agent names it, the tool's error lists the problems the SDK raised, line by line
    with pytest.raises(ToolCallError) as caught:
        tools.call("run_loop", {"prompt": "a red circle", "rounds": 1, "candidates": 1,
                                "model": "tinny"})
    assert [f"- {line}" for line in said] == [
        line for line in str(caught.value).splitlines() if line.startswith("- ")]
    # and a campaign naming it is refused with the same problem, at its own field
    spec = parse_spec({"name": "names", "template": "a red {shape}",
                       "axes": {"shape": ["circle"]},
                       "loop": {"model": "tinny", "rounds": 1, "candidates": 1}})
    assert name_problems(spec, stack.backend.schema().served) == [f"loop.{line}"
                                                                  for line in said]



def test_a_loop_through_the_gateway_is_compiled_once_and_stored_as_admitted(stack, monkeypatch):
    _, key = stack.tenant()
    compiled = []
    compile_loop = Loop.compile
    monkeypatch.setattr(Loop, "compile", lambda self: compiled.append(1) or compile_loop(self))
    # Given a loop that names no model, when a tenant submits it
    run = stack.client(key).submit(Loop(prompt="a red circle", rounds=1, candidates=1, steps=1))
    run.cancel()  # what is stored is the point, not the image
    # Then admission compiled it, and the back end stored that graph without compiling again
    assert len(compiled) == 1
    stored = stack.backend.scheduler.store.run_spec(run.id)
    # with the back end's default model filled in (spec and graph alike) and the tenant's
    # namespace on both
    served = stack.backend.served()
    assert stored.spec["model"] == served.default_model
    [generate] = [n for n in stored.graph["nodes"] if n["op"] == "generate"]
    assert generate["params"]["model"] == served.default_model
    assert stored.spec["namespace"] == stored.graph["namespace"]
    assert stored.graph["namespace"].startswith("tenant:")
