"""A run's lane through the gateway: the spec's ``priority`` wins, else the tenant's default
(interactive unless the operator set batch), on both back ends."""

from __future__ import annotations

from genloop.gateway.limits import TenantLimits
from genloop.sdk import Graph, Loop


def _lane(stack, run_id: str) -> str | None:
    return stack.backend.scheduler.store.run_spec(run_id).graph.get("priority")


def test_a_run_takes_its_specs_lane_else_its_tenants_default(stack):
    _, plain = stack.tenant()
    _, bulk = stack.tenant(TenantLimits(priority="batch"))
    loop = Loop(prompt="a red circle", model="tiny", candidates=1, rounds=1, steps=1)
    graph = Graph()
    graph.generate("a red circle", model="tiny", n=1, steps=1)

    agent = stack.client(plain).submit(loop)
    campaign = stack.client(bulk).submit(graph)
    asked = stack.client(bulk).submit(loop.model_copy(update={"priority": "interactive"}))

    assert _lane(stack, agent.id) == "interactive"
    assert _lane(stack, campaign.id) == "batch"
    assert _lane(stack, asked.id) == "interactive"
    for run in (agent, campaign, asked):
        run.wait(timeout=60)
