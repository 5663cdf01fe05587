"""vlm-judge against a real chat-completions server on 127.0.0.1 (see vlm_server.py).

Each test gives the server recorded answers, scores images, and checks what went over the wire
and what came back: the request's form, P(yes) from log-probabilities and from text, the cache,
retries on 429 and timeouts, unreadable answers, token counts, the rate limit and concurrency
bound, that only the operator's environment names the server, and a loop that uses the judge.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import pytest
from PIL import Image
from vlm_server import ChatServer, Reply, Seen, completion

from genloop.evaluators import EvaluatorRegistry, VlmJudge
from genloop.evaluators.registry import register_builtins
from genloop.evaluators.vlm_client import VlmConfig
from genloop.evaluators.vlm_judge import questions
from genloop.sdk.errors import GraphError, Permanent, Transient
from genloop.sdk.ops import JudgeUsage

PAIR = "a small yellow circle above a large green triangle, black background"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    chat = ChatServer()
    yield chat
    chat.stop()


@pytest.fixture
def make_judge(server: ChatServer) -> Iterator:
    """Judges of ``server`` with fast retries; closed after the test."""
    built: list[VlmJudge] = []

    def make(**options) -> VlmJudge:
        tuning = {"max_rps": 1000.0, "max_backoff": 0.05, "timeout": 5.0, **options}
        rest = {k: tuning.pop(k) for k in ("concurrency", "cache_size") if k in tuning}
        judge = VlmJudge(VlmConfig(base_url=server.url, model="test-vlm", **tuning), **rest)
        built.append(judge)
        return judge

    yield make
    for judge in built:
        judge.close()


@pytest.fixture
def operator_env(server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> ChatServer:
    """The operator's environment pointing at ``server``."""
    monkeypatch.setenv("GENLOOP_VLM_BASE_URL", server.url)
    monkeypatch.setenv("GENLOOP_VLM_MODEL", "test-vlm")
    monkeypatch.setenv("GENLOOP_VLM_API_KEY", "sk-operator")
    return server


def plain(colour: str) -> Image.Image:
    return Image.new("RGB", (16, 16), colour)


def test_a_request_asks_one_token_with_logprobs_about_a_png_data_url(operator_env):
    # Given the operator's environment names the server, model and key
    judge = register_builtins(EvaluatorRegistry()).get("vlm-judge", "cpu")
    try:
        # When a red image is scored against free text
        judge.score([plain("red")], "a red square")
    finally:
        judge.close()
    # Then one request asked the whole prompt, with the image as a PNG data URL
    (seen,) = operator_env.seen
    assert seen.headers["Authorization"] == "Bearer sk-operator"
    body = seen.body
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("test-vlm", 1, 0)
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert seen.question == "Does this image show: a red square? Answer yes or no."
    url = body["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]).startswith(b"\x89PNG")
    assert seen.image.getpixel((3, 3)) == (255, 0, 0)


def test_p_yes_is_a_softmax_over_yes_and_no_tokens_in_any_case_or_spacing(server, make_judge):
    # Given top log-probs with two spellings of yes, one of no, and an unrelated token
    server.answer = lambda seen: Reply(completion(
        "Yes", top={"Yes": 0.5, " yes": 0.1, "NO": 0.2, "The": 0.2}))
    # When an image is scored
    scores = make_judge().score([plain("red")], "a red square")
    # Then P(yes) = (0.5 + 0.1) / (0.5 + 0.1 + 0.2), the unrelated token left out
    assert scores.values == [pytest.approx(100 * 0.6 / 0.8)]
    assert scores.evaluator == "vlm-judge:1/test-vlm"


def test_without_logprobs_the_answer_word_decides(server, make_judge):
    # Given a server that returns no log-probs: "Yes." for red images, " no" for the others
    server.answer = lambda seen: Reply(completion(
        "Yes." if seen.image.getpixel((0, 0)) == (255, 0, 0) else " no"))
    # When a red and a blue image are scored
    scores = make_judge().score([plain("red"), plain("blue")], "a red square")
    # Then yes counts 1 and no counts 0
    assert scores.values == [100.0, 0.0]


def test_a_shapes_caption_asks_per_clause_and_names_the_weakest(server, make_judge):
    # Given a model fairly sure of every clause but the second object's shape
    def answer(seen: Seen) -> Reply:
        doubt = "second object's shape" in seen.question
        return Reply(completion("Yes", top={"Yes": 0.3 if doubt else 0.9,
                                             "No": 0.7 if doubt else 0.1}))

    server.answer = answer
    # When a shapes caption with two objects is scored
    scores = make_judge().score([plain("black")], PAIR)
    # Then there is one question per clause, in the critic's clause names
    asked = questions(PAIR)
    assert len(server.seen) == len(asked) == 8
    assert {s.question for s in server.seen} == {q.text + " Answer yes or no." for q in asked}
    (critique,) = scores.details
    assert [c.clause for c in critique.clauses][:3] == ["first.size", "first.colour",
                                                         "first.shape"]
    assert critique.weakest == "second.shape"
    assert dict((c.clause, c.score) for c in critique.clauses)["second.shape"] == (
        pytest.approx(30.0))
    # And the score is the chance that every clause holds
    assert scores.values == [pytest.approx(100 * 0.9**7 * 0.3)]


def test_the_same_image_and_question_is_asked_once(server, make_judge):
    # Given a judge with room for two answers
    judge = make_judge(cache_size=2)
    red, blue, green = plain("red"), plain("blue"), plain("green")
    # When one batch holds the same image twice, and the image is scored again later
    judge.score([red, red.copy()], "a red square")
    judge.score([red], "a red square")
    # Then the server heard the question once
    assert len(server.seen) == 1
    assert judge.usage.cache_hits == 2
    # And the cache is bounded: two newer answers push the oldest out, so it is asked again
    judge.score([blue, green], "a red square")
    judge.score([red], "a red square")
    assert len(server.seen) == 4
    assert len(judge.cache) == 2


def test_a_429_is_retried_after_its_retry_after(server, make_judge):
    # Given the server is over quota once and asks for a second's pause
    server.script.append(Reply({"error": {"message": "rate limited"}}, status=429,
                               headers={"Retry-After": "1"}))
    # When an image is scored
    scores = make_judge(max_backoff=5.0).score([plain("red")], "a red square")
    # Then the second try came after the pause, and it scored
    first, second = server.seen
    assert second.at - first.at >= 0.95
    assert scores.values == [100.0]


def test_retry_after_is_capped_by_max_backoff(server, make_judge):
    # Given a server that asks for a minute's pause
    server.script.append(Reply("", status=429, headers={"Retry-After": "60"}))
    began = time.monotonic()
    # When the judge's cap is 0.3 s
    make_judge(max_backoff=0.3).score([plain("red")], "a red square")
    # Then it waited the cap, not the minute
    first, second = server.seen
    assert 0.3 <= second.at - first.at < 5 and time.monotonic() - began < 5


def test_a_timeout_is_retried(server, make_judge):
    # Given a first answer that comes later than the judge waits
    server.script.append(Reply(completion("No"), delay=1.5))
    # When an image is scored with a 0.5 s timeout
    scores = make_judge(timeout=0.5).score([plain("red")], "a red square")
    # Then the question was asked again and the second (prompt) answer counts
    assert len(server.seen) == 2
    assert scores.values == [100.0]


def test_a_reply_that_is_not_a_chat_completion_is_retried(server, make_judge):
    # Given a proxy error page once, with status 200
    server.script.append(Reply("<html>upstream hiccup</html>"))
    # When an image is scored
    scores = make_judge().score([plain("red")], "a red square")
    # Then the question was asked again and answered
    assert len(server.seen) == 2
    assert scores.values == [100.0]


def test_a_server_that_stays_down_is_a_transient_error(server, make_judge):
    # Given a server that fails every try
    server.answer = lambda seen: Reply("bad gateway", status=502)
    # When an image is scored with three tries
    with pytest.raises(Transient, match="HTTP 502"):
        make_judge(attempts=3).score([plain("red")], "a red square")
    # Then it tried three times
    assert len(server.seen) == 3


def test_a_refused_key_is_permanent_and_says_what_to_check(server, make_judge):
    server.answer = lambda seen: Reply({"error": {"message": "bad key"}}, status=401)
    with pytest.raises(Permanent, match="GENLOOP_VLM_API_KEY"):
        make_judge().score([plain("red")], "a red square")
    assert len(server.seen) == 1


def test_an_unreadable_answer_scores_that_image_0_and_spares_the_batch(server, make_judge):
    # Given a model that answers blue images with a word that is neither yes nor no
    server.answer = lambda seen: Reply(completion(
        "Yes" if seen.image.getpixel((0, 0)) == (255, 0, 0) else "Maybe"))
    judge = make_judge(attempts=2)
    # When a red and a blue image are scored in one batch
    scores = judge.score([plain("red"), plain("blue")], "a red square")
    # Then the red one keeps its score, the blue one scores 0 after both tries
    assert scores.values == [100.0, 0.0]
    assert scores.details[1].clauses[0].score == 0.0
    assert len(server.seen) == 1 + 2
    assert judge.usage.unreadable == 1
    # And the unreadable answer is not cached: the next scoring asks again
    judge.score([plain("blue")], "a red square")
    assert len(server.seen) == 1 + 2 + 2


def test_usage_counts_requests_and_tokens(server, make_judge):
    # Given replies that bill 120 prompt tokens and 1 completion token, and one retry
    server.script.append(Reply("", status=503))
    judge = make_judge()
    # When three images are scored against free text (one question each)
    judge.score([plain("red"), plain("blue"), plain("green")], "a red square")
    # Then four requests went out, three were answered and billed
    usage = judge.usage
    assert (usage.requests, usage.questions, usage.cache_hits) == (4, 3, 0)
    assert (usage.prompt_tokens, usage.completion_tokens) == (360, 3)


def test_each_image_is_billed_what_asking_about_it_cost(server, make_judge):
    # Given replies that bill 120 prompt tokens and 1 completion token, and one retry
    server.script.append(Reply("", status=503))
    judge = make_judge()
    red, blue, green = plain("red"), plain("blue"), plain("green")
    # When three images are scored against free text (one question each), red twice in the batch
    first = judge.score([red, blue, green, red.copy()], "a red square")
    # Then each image is billed its own question, the retry the image it was for, and the
    # repeat nothing
    assert first.usage is not None
    assert sorted(u.calls for u in first.usage[:3]) == [1, 1, 2]
    assert [(u.prompt_tokens, u.completion_tokens) for u in first.usage[:3]] == [(120, 1)] * 3
    assert first.usage[3] == JudgeUsage()
    # And the bills add up to what the judge counted
    total = judge.usage
    assert sum(first.usage, JudgeUsage()) == JudgeUsage(
        calls=total.requests, prompt_tokens=total.prompt_tokens,
        completion_tokens=total.completion_tokens)
    # And scored again, the answers come from the cache and cost nothing
    assert judge.score([red, blue], "a red square").usage == [JudgeUsage(), JudgeUsage()]


SIX = ("red", "blue", "green", "white", "black", "yellow")


def test_requests_keep_to_the_rate_limit(server, make_judge):
    # When six questions go to a judge of four in flight at ten a second
    make_judge(concurrency=4, max_rps=10.0).score([plain(c) for c in SIX], "a red square")
    # Then they did not arrive in a burst but about 0.1 s apart
    starts = sorted(s.at for s in server.seen)
    assert len(starts) == 6 and starts[-1] - starts[0] >= 0.4
    assert min(b - a for a, b in zip(starts, starts[1:], strict=False)) >= 0.05


def test_no_more_than_concurrency_requests_are_in_flight(server, make_judge):
    # Given answers that take 0.2 s
    server.answer = lambda seen: Reply(completion("Yes"), delay=0.2)
    # When six questions go to a judge of two in flight
    make_judge(concurrency=2).score([plain(c) for c in SIX], "a red square")
    # Then two were in flight at once, never more
    assert len(server.seen) == 6 and server.max_in_flight == 2


def test_only_the_operator_environment_names_the_server(server, operator_env, monkeypatch):
    registry = register_builtins(EvaluatorRegistry())
    # Given trusted code that passes a URL or a key as options: refused, naming the variable
    for option in ("base_url", "api_key", "model"):
        with pytest.raises(Permanent, match=r"takes no option .*GENLOOP_VLM_BASE_URL"):
            registry.get("vlm-judge", "cpu", **{option: "http://127.0.0.1:9/v1"})
    # And a tenant's spec may give vlm-judge no options at all (the gateway's admission)
    from genloop.gateway.admission import default_admission
    from genloop.gateway.limits import TenantLimits
    from genloop.sdk import Loop
    from genloop.workers import default_registry as ops

    loop = Loop(prompt="p", rounds=1, candidates=1, model="tiny", evaluator="vlm-judge",
                evaluator_options={"base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(GraphError, match="evaluator 'vlm-judge' takes no options from a tenant"):
        default_admission(ops).admit(loop, TenantLimits())
    # When the operator has not configured it, building it says which variables to set
    monkeypatch.delenv("GENLOOP_VLM_BASE_URL")
    with pytest.raises(Permanent, match="the operator sets GENLOOP_VLM_BASE_URL"):
        registry.get("vlm-judge", "cpu")
    assert server.seen == []


def test_a_loop_runs_with_vlm_judge(operator_env, resources, tmp_path):
    from genloop.sdk import Client, Loop, RunStatus
    from genloop.workers.models.resources import Resources

    # Given a server fairly sure every image shows the prompt
    operator_env.answer = lambda seen: Reply(completion("Yes", top={"Yes": 0.75, "No": 0.25}))
    # And a runtime whose registry builds vlm-judge from the environment set above
    judges = register_builtins(EvaluatorRegistry())
    own = Resources(device="cpu", models=resources.models, evaluators=judges)
    with Client.local(home=tmp_path / "home", threads=2, resources=own) as client:
        # When a one-round loop of two candidates is judged by it
        loop = Loop(prompt="a red sneaker", model="tiny", evaluator="vlm-judge", candidates=2,
                    rounds=1, steps=1)
        result = client.submit(loop).wait(timeout=120)
    judge = judges.get("vlm-judge", "cpu")
    judge.close()
    # Then every candidate was asked about once and scored by P(yes)
    assert result.status == RunStatus.SUCCEEDED, result.error
    (round_1,) = result.rounds
    assert [c.score for c in round_1.candidates] == [pytest.approx(75.0)] * 2
    assert round_1.candidates[0].details.weakest == "a red sneaker"
    assert len(operator_env.seen) == 2 == judge.usage.questions
    # And the run's compute counts the two requests and the tokens their replies billed
    assert result.compute.judge == JudgeUsage(calls=2, prompt_tokens=240, completion_tokens=2)
