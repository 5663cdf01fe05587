"""Agent-driven refine through the tools: run_loop with refiner 'agent' pauses and shows its
candidates; refine_run answers with the next round's images (new draws or edits)."""

from __future__ import annotations

import pytest
from agent_tools import GENERATE, LOOP, run_count

from genloop.integrations import ToolCallError, dispatch
from genloop.sdk import RunStatus

PNG = b"\x89PNG\r\n\x1a\n"
AGENT_LOOP = {**LOOP, "refiner": "agent", "rounds": 2, "candidates": 2}
GENERATE_ONE = {**GENERATE, "n": 1}

pytestmark = pytest.mark.slow


def _paused(tools):
    out = tools.call("run_loop", AGENT_LOOP)
    assert not out.done and out.refine is not None, out.text
    return out


def test_an_agent_loop_pauses_with_its_candidates_and_refine_run_makes_the_next_round(
        tools, client):
    paused = _paused(tools)

    assert paused.status == RunStatus.RUNNING and paused.refine.round == 1
    assert paused.refine.node_id == "round-1/refine" and paused.refine.candidates == 2
    assert [im.label for im in paused.images] == ["best", "top 2"]
    assert all(im.png.startswith(PNG) for im in paused.images)
    assert paused.images[0].score >= paused.images[1].score
    assert "refine_run" in paused.text and paused.images[0].artifact in paused.text

    edited = paused.images[1].artifact
    out = tools.call("refine_run", {
        "run_id": paused.run_id, "wait_seconds": 120,
        "requests": [{"prompt": "a blue square", "seed": 11},
                     {"prompt": "a red circle, sharper", "seed": 12, "init_image": edited,
                      "strength": 0.6}],
    })

    assert out.done and out.status == RunStatus.SUCCEEDED, out.text
    assert [r.round for r in out.rounds] == [1, 2]
    second = client.get(paused.run_id).result().rounds[1].candidates
    assert sorted((c.prompt, c.seed) for c in second) == [
        ("a blue square", 11), ("a red circle, sharper", 12)]


def test_get_run_sees_a_pause_that_began_before_the_call(tools):
    paused = _paused(tools)

    again = tools.call("get_run", {"run_id": paused.run_id, "wait_seconds": 0})

    assert again.refine is not None and again.refine.node_id == paused.refine.node_id
    assert again.images[0].artifact == paused.images[0].artifact
    tools.call("cancel_run", {"run_id": paused.run_id})


def test_a_second_answer_is_a_readable_error_that_changes_nothing(tools):
    paused = _paused(tools)
    answer = {"run_id": paused.run_id, "requests": [{"prompt": "a red circle", "seed": 3}],
              "wait_seconds": 120}
    first = tools.call("refine_run", answer)

    with pytest.raises(ToolCallError, match="not waiting for this answer"):
        tools.call("refine_run", answer)
    assert first.done and first.status == RunStatus.SUCCEEDED


def test_bad_refine_arguments_name_the_field_and_answer_nothing(tools, client):
    paused = _paused(tools)

    bad = dispatch(tools, "refine_run", {
        "run_id": paused.run_id,
        "requests": [{"prompt": "", "seed": 1, "strength": 2, "colour": "red"}],
    })
    empty = dispatch(tools, "refine_run", {"run_id": paused.run_id, "requests": []})

    assert bad.error and "- requests.0.prompt:" in bad.text
    assert "- requests.0.strength:" in bad.text and "- requests.0.colour:" in bad.text
    assert empty.error and "- requests:" in empty.text
    still = tools.call("get_run", {"run_id": paused.run_id, "wait_seconds": 0})
    assert still.refine is not None  # still waiting: nothing was answered
    assert run_count(client) == 1
    tools.call("cancel_run", {"run_id": paused.run_id})


def test_a_strict_refine_call_with_nulls_uses_the_defaults_of_each_image(tools):
    args = tools.parse("refine_run", {
        "run_id": "r1", "node_id": None, "wait_seconds": None,
        "requests": [{"prompt": "a cat", "seed": None, "init_image": None, "strength": None}],
    })

    assert args.wait_seconds == 120 and args.requests[0].seed == 0


def test_an_edit_of_an_image_the_pause_did_not_show_is_a_tool_error_and_the_pause_stays(tools):
    paused = _paused(tools)

    out = dispatch(tools, "refine_run", {
        "run_id": paused.run_id,
        "requests": [{"prompt": "a red circle", "seed": 1, "init_image": "someone-elses.png"}],
    })

    assert out.error and "init_image" in out.text and "someone-elses.png" in out.text
    still = tools.call("get_run", {"run_id": paused.run_id, "wait_seconds": 0})
    assert still.refine is not None and still.refine.node_id == paused.refine.node_id
    taken = tools.call("refine_run", {"run_id": paused.run_id, "wait_seconds": 120,
                                      "requests": [{"prompt": "a red circle", "seed": 2}]})
    assert taken.done and taken.status == RunStatus.SUCCEEDED, taken.text


def test_answers_the_pause_cannot_use_are_refused_before_the_claim_and_the_pause_stays(tools):
    # Given an image of the agent's own that this pause never showed, and a paused loop
    elsewhere = tools.call("generate_images", {**GENERATE_ONE, "seed": 41}).images[0].artifact
    paused = _paused(tools)
    assert elsewhere not in {im.artifact for im in paused.images}
    bad = {
        "an image of another run": {"init_image": elsewhere, "strength": 0.5},
        "a malformed key": {"init_image": "../../etc/passwd", "strength": 0.5},
        "strength without init_image": {"strength": 0.5},
    }
    for why, fields in bad.items():
        # When the agent answers with it
        out = dispatch(tools, "refine_run", {
            "run_id": paused.run_id, "requests": [{"prompt": "a red circle", "seed": 1,
                                                   **fields}]})
        # Then the tool says what is wrong, and the pause still waits for an answer
        assert out.error, why
        assert ("init_image" in out.text if "init_image" in fields else "strength" in out.text)
        still = tools.call("get_run", {"run_id": paused.run_id, "wait_seconds": 0})
        assert still.refine is not None and still.refine.node_id == paused.refine.node_id, why
    # and a valid edit of a shown candidate is still taken and runs to the end
    taken = tools.call("refine_run", {
        "run_id": paused.run_id, "wait_seconds": 120,
        "requests": [{"prompt": "a red circle", "seed": 2,
                      "init_image": paused.images[0].artifact, "strength": 0.5}]})
    assert taken.done and taken.status == RunStatus.SUCCEEDED, taken.text
