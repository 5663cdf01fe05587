"""The framework-neutral tools: runs, waiting, the not-done-yet path, errors, progress."""

from __future__ import annotations

import asyncio

import pytest
from agent_tools import CATALOG, GENERATE, LOOP, run_count

from genloop.integrations import GenloopTools, Progress, ToolCallError
from genloop.sdk import Event, RunInfo, RunStatus
from genloop.sdk.aio import AsyncClient, ThreadedBackend

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_generate_images_returns_the_top_k_with_scores(tools):
    out = tools.call("generate_images", {**GENERATE, "n": 3, "top_k": 2})

    assert out.done and out.status == RunStatus.SUCCEEDED and not out.error
    assert [im.label for im in out.images] == ["best", "top 2"]
    assert out.images[0].score >= out.images[1].score
    assert all(im.png.startswith(PNG) for im in out.images)
    assert f"score {out.images[0].score:.2f}" in out.text


@pytest.mark.slow
def test_run_loop_returns_the_best_image_and_every_rounds_best(tools):
    out = tools.call("run_loop", LOOP)

    assert out.done and out.status == RunStatus.SUCCEEDED
    assert [r.round for r in out.rounds] == [1, 2]
    assert out.images[0].label == "best"
    assert out.images[0].score == max(r.best_score for r in out.rounds)
    assert "Best score per round" in out.text


@pytest.mark.slow
def test_a_call_not_done_in_time_returns_the_run_id_and_get_run_completes_it(tools):
    started = tools.call("run_loop", {**LOOP, "wait_seconds": 0})

    assert not started.done and started.run_id and not started.images
    assert "get_run" in started.text and started.run_id in started.text
    finished = tools.call("get_run", {"run_id": started.run_id, "wait_seconds": 120})
    assert finished.done and finished.status == RunStatus.SUCCEEDED
    assert finished.run_id == started.run_id and finished.images[0].png.startswith(PNG)


@pytest.mark.slow
def test_cancel_run_stops_a_run(tools):
    started = tools.call("run_loop", {**LOOP, "rounds": 5, "wait_seconds": 0})

    out = tools.call("cancel_run", {"run_id": started.run_id})

    assert out.run_id == started.run_id
    end = tools.call("get_run", {"run_id": started.run_id, "wait_seconds": 60})
    assert end.status == RunStatus.CANCELLED


@pytest.mark.parametrize(("arguments", "field", "hint"), [
    ({**LOOP, "model": "sdxl"}, "model", "'tiny'"),
    ({**LOOP, "evaluator": "gpt"}, "evaluator", "'clip'"),
    ({**LOOP, "refiner": "magic"}, "refiner", "'seed-search'"),
    ({**LOOP, "rounds": 99}, "rounds", "less than or equal to 10"),
    ({**LOOP, "width": 13}, "width", "multiple of 8"),
    ({k: v for k, v in LOOP.items() if k != "prompt"}, "prompt", "Field required"),
    ({**LOOP, "colour": "red"}, "colour", "Extra inputs are not permitted"),
])
def test_bad_arguments_name_the_field_and_create_nothing(tools, client, arguments, field, hint):
    with pytest.raises(ToolCallError) as caught:
        tools.call("run_loop", arguments)

    message = str(caught.value)
    assert f"- {field}:" in message and hint in message and "call run_loop again" in message
    assert run_count(client) == 0


@pytest.mark.parametrize("arguments", [
    {**LOOP, "prompt": "a red circle " * 8_000, "rounds": 99},  # refused by the arguments
    {**LOOP, "model": "m" * 100_000},                            # by the back end's checks
    {"run_id": "r" * 100_000, "wait_seconds": 0},                # an unknown run
])
def test_an_error_quotes_at_most_200_characters_of_a_long_value(tools, arguments):
    tool = "get_run" if "run_id" in arguments else "run_loop"
    with pytest.raises(ToolCallError) as caught:
        tools.call(tool, arguments)

    message = str(caught.value)
    assert len(message) < 1_500 and "characters)" in message, message[:300]


def test_top_k_above_n_is_refused_before_submitting(tools, client):
    with pytest.raises(ToolCallError, match="top_k must not exceed n"):
        tools.call("generate_images", {**GENERATE, "n": 2, "top_k": 3})
    assert run_count(client) == 0


def test_unknown_run_and_unknown_tool_are_readable_errors(tools):
    with pytest.raises(ToolCallError, match="Check the run_id"):
        tools.call("get_run", {"run_id": "nosuchrun", "wait_seconds": 0})
    with pytest.raises(ToolCallError, match="the tools are: generate_images, run_loop"):
        tools.call("make_video", {})


def test_null_means_the_default_for_fields_that_have_one(tools):
    args = tools.parse("run_loop", {"prompt": "a cat", "rounds": None, "steps": None})

    assert args.rounds == 3 and args.steps is None


@pytest.mark.slow
def test_a_waiting_call_reports_growing_progress(tools):
    reports: list[Progress] = []

    async def sink(report: Progress) -> None:
        reports.append(report)

    out = asyncio.run(tools.acall("run_loop", LOOP, progress=sink))

    assert out.done
    values = [r.progress for r in reports]
    assert values == sorted(values) and values[-1] >= 5  # two rounds: 5 nodes end
    assert reports[0].total == 5
    assert any("step" in r.message for r in reports)


class EndsDuringReplay(ThreadedBackend):
    """A real back end whose run ends while the tool replays its events: asked before the
    replay the run is still running, asked after it the run has ended (its last event was in
    the replay). Counts the follows the tool opens."""

    def __init__(self, backend) -> None:
        super().__init__(backend)
        self.replayed, self.follows = False, 0

    async def get(self, run_id: str) -> RunInfo:
        info = await super().get(run_id)
        if self.replayed:
            return info
        return info.model_copy(update={"status": RunStatus.RUNNING, "finished_at": None})

    async def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        batch = await super().events(run_id, after, limit)
        self.replayed = True
        return batch

    async def follow(self, run_id: str, after: int = 0, poll: float = 0.05):
        self.follows += 1
        async for event in super().follow(run_id, after, poll):
            yield event


def test_a_run_that_ends_during_the_replay_is_not_followed(shared_client, finished_run):
    # Given a run that ends while get_run replays its events
    backend = EndsDuringReplay(shared_client.backend)
    tools = GenloopTools(AsyncClient(backend), catalog=CATALOG)
    # When get_run waits for it
    out = asyncio.run(tools.acall("get_run", {"run_id": finished_run, "wait_seconds": 2}))
    # Then it returns the ended run without following: nothing is left to follow after the
    # run's last event, so a follow would only have waited out wait_seconds
    assert out.done and out.status == RunStatus.SUCCEEDED
    assert backend.follows == 0


def test_get_run_finds_the_newest_run_with_a_label(tools):
    first = tools.call("run_loop", {**LOOP, "label": "task-7", "rounds": 1})
    second = tools.call("generate_images", {**GENERATE, "label": "task-7", "seed": 5})

    found = tools.call("get_run", {"label": "task-7", "wait_seconds": 0})

    assert found.run_id == second.run_id != first.run_id and found.done
    for arguments, hint in (({"wait_seconds": 0}, "give run_id, or label"),
                            ({"run_id": first.run_id, "label": "task-7"}, "give run_id, or"),
                            ({"label": "nobody-used-this"}, "No run has the label")):
        with pytest.raises(ToolCallError, match=hint):
            tools.call("get_run", arguments)
