"""A bare Loop behind the gateway runs the model's recipe, admitted as what will run."""

from __future__ import annotations

from genloop import shapes
from genloop.gateway import TenantLimits
from genloop.sdk import Loop

CAPTION = "a large red circle in the centre, black background"


def test_a_bare_loop_over_http_runs_the_recipe(stack):
    # Given a tenant; When its loop gives only the prompt (the SDK sends the fields set)
    _, key = stack.tenant()
    client = stack.client(key)
    assert client.schema().served.recipes["shapes"] == shapes.RECIPE
    result = client.submit(Loop(prompt=CAPTION)).wait(timeout=300)
    # Then the recipe ran: 4-step drafts judged by the critic
    assert result.status == "succeeded"
    assert {c.steps for c in result.scored} == {shapes.RECIPE["steps"]}
    assert all(c.details is not None for c in result.scored)


def test_a_tenant_barred_from_the_recipes_judge_gets_the_plain_defaults(stack):
    # Given a tenant allowed shapes-clip only; When it sends a bare loop
    _, key = stack.tenant(TenantLimits(evaluators=["shapes-clip"]))
    client = stack.client(key)
    run = client.submit(Loop(prompt=CAPTION))
    try:
        # Then it is admitted, as the plain 3-round loop (3 generate and score nodes, 2 refines),
        # not refused for an evaluator it never named nor run with it behind admission's back
        nodes = [n.node_id for n in client.get(run.id).status().nodes]
        assert len(nodes) == 8 and "round-3/score" in nodes
    finally:
        run.cancel()
