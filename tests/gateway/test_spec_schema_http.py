"""``GET /v1/schema`` and invalid specs over HTTP: what an agent behind the gateway sees."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from genloop.sdk import Graph, GraphError, Loop


def test_the_gateway_publishes_its_back_ends_schema(stack):
    # Given a tenant; When it asks the gateway for the spec schema (sync and async)
    _, key = stack.tenant()
    over_http = stack.client(key).schema()

    async def aschema():
        async with stack.aclient(key) as client:
            return await client.schema()

    # Then it is the back end's own, enums and all, less the judges a tenant cannot use
    # (hf-clip needs a path, which a tenant may never give)
    own = stack.backend.schema()
    assert over_http == asyncio.run(aschema())
    assert over_http.served.evaluators == [  # what a tenant can give: a palette, weights
        j for j in own.served.evaluators if set(j.needs) <= {"palette", "weights"}]
    assert over_http.served.model_copy(update={"evaluators": []}) == own.served.model_copy(
        update={"evaluators": []})
    assert "hf-clip" not in over_http.loop["properties"]["evaluator"]["enum"]
    ops = [v["$ref"].rsplit("_", 1)[1] for v in
           over_http.graph["properties"]["nodes"]["items"]["anyOf"]]
    assert "gw-image" in ops and "generate" in ops
    assert over_http.loop["properties"]["evaluator"]["enum"][-1] is None
    assert httpx.get(f"{stack.url}/v1/schema").status_code == 401


def test_a_tenant_allowed_some_judges_sees_only_those(stack):
    from genloop.gateway import TenantLimits

    _, key = stack.tenant(TenantLimits(evaluators=["clip", "hf-clip"]))
    schema = stack.client(key).schema()
    # hf-clip stays out though allowed: a tenant can never give its path
    assert [j.name for j in schema.served.evaluators] == ["clip"]
    assert schema.loop["properties"]["evaluator"]["enum"] == ["clip", None]


def test_an_invalid_spec_comes_back_as_paths_received_and_allowed(stack):
    _, key = stack.tenant()
    g = Graph()
    g.add("gw-image", id="img", params={"label": "x", "n": "many"})
    g.add("score", id="score", inputs=["img"], params={"text": "x", "evaluator": "clipp"})

    with pytest.raises(GraphError) as caught:
        stack.client(key).submit(g)

    problems = {p.path: p for p in caught.value.problems}
    assert set(problems) == {"nodes[0].params.n", "nodes[1].params.evaluator"}
    assert problems["nodes[0].params.n"].received == "many"
    assert "shapes-clip" in problems["nodes[1].params.evaluator"].allowed
    with pytest.raises(GraphError) as loop_error:
        stack.client(key).submit(Loop(prompt="p", refiner="nope"))
    (problem,) = loop_error.value.problems
    assert (problem.path, problem.received) == ("refiner", "nope")
    assert "seed-search" in problem.allowed
