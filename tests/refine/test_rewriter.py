"""prompt-history: a PromptRewriter turns the (prompt, score) history into the next prompts."""

from __future__ import annotations

from genloop.sdk import Loop, RunStatus
from genloop.workers.ops.rewriters import RuleRewriter, register_rewriter


def test_the_rule_rewriter_builds_on_the_best_prompt_with_untried_modifiers():
    rules = RuleRewriter(["sharp focus", "vivid colours"])
    history = [("a cat", 20.0), ("a cat, sharp focus", 30.0), ("a cat, vivid colours", 10.0)]

    assert rules.rewrite(history, 3) == [
        "a cat, sharp focus, sharp focus", "a cat, sharp focus, vivid colours",
        "a cat, sharp focus"]


def test_a_registered_rewriter_writes_the_next_round(client):
    class Echo:
        def rewrite(self, history, n):
            best = max(history, key=lambda h: h[1])[0]
            return [f"{best} #{len(history)}"] * n

    register_rewriter("echo-test", Echo())
    loop = Loop(prompt="a red sneaker", candidates=2, rounds=2, steps=2,
                refiner="prompt-history")
    graph = loop.compile()
    graph.node("round-1/refine").params["rewriter"] = "echo-test"

    result = client.submit(graph).wait(timeout=120)

    assert result.status == RunStatus.SUCCEEDED
    assert {c.prompt for c in result.rounds[1].candidates} == {"a red sneaker #2"}
